/* libidentity_copy.so: the step that fills an output from its input's buffers.
 * A plugin: libtriton_identity.so loads it at run time with dlopen from its own folder and
 * never lists it as NEEDED, as NGC's backends do with their run-time loaded parts. */
#include <stddef.h>
#include <string.h>

__attribute__((visibility("default"))) size_t identity_copy_buffers(
    void* dst, size_t dst_size, const void* const* srcs, const size_t* sizes, size_t count) {
  size_t done = 0;
  for (size_t i = 0; i < count; i++) {
    if (sizes[i] > dst_size - done) return (size_t)-1; /* more input than output room */
    memcpy((char*)dst + done, srcs[i], sizes[i]);
    done += sizes[i];
  }
  return done;
}
