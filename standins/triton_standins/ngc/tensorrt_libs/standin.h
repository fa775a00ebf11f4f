/* Shared by the TensorRT 10 stand-in libraries (triton-composer): what they declare of
 * TensorRT's public C entry points and of libcudart, and the note each library carries.
 *
 * TensorRT itself cannot be had on these machines (no wheel, no Debian package), so these
 * libraries stand in for it: same file names and sonames as the release's TensorRT, the C entry
 * points a backend reaches first, and a GPU check through the real libcudart. They run no
 * engine: deserializing a plan fails with the reason (no GPU, or "this is a stand-in"). */
#ifndef COMPOSER_TRT_STANDIN_H
#define COMPOSER_TRT_STANDIN_H

#include <stddef.h>
#include <stdint.h>

#define STANDIN_EXPORT __attribute__((visibility("default")))

/* The TensorRT release stood in for (build.sh passes it: -DTRT_MINOR=... -DTRT_PATCH=...).
 * TensorRT 10 encodes its version as major * 10000 + minor * 100 + patch. */
#ifndef TRT_MINOR
#error "build.sh passes TRT_MINOR and TRT_PATCH"
#endif
#define STANDIN_STR2(x) #x
#define STANDIN_STR(x) STANDIN_STR2(x)
#define STANDIN_TRT_VERSION (10 * 10000 + TRT_MINOR * 100 + TRT_PATCH)

/* Every library says what it is, in a section of its own and in its read-only data, so
 * `strings`, `readelf -p .triton_composer` and scanners see it is not NVIDIA's library. */
#define STANDIN_NOTE(lib)                                                                \
  __attribute__((section(".triton_composer"), used)) static const char standin_note[] = \
      lib ": triton-composer stand-in for NVIDIA TensorRT 10." STANDIN_STR(TRT_MINOR) "." STANDIN_STR(TRT_PATCH) \
          " (not NVIDIA's library; runs no engine)"

/* libnvinfer's own entry points, as TensorRT's headers declare them with C linkage. The
 * logger and runtime are opaque here: the stand-in never calls back into the logger. */
STANDIN_EXPORT int32_t getInferLibVersion(void);
STANDIN_EXPORT void* createInferRuntime_INTERNAL(void* logger, int32_t version);
/* Not in TensorRT's C entry points: TensorRT deserializes through IRuntime's C++ methods.
 * The stand-in offers this C call instead; it returns NULL and writes why into `why`. */
STANDIN_EXPORT void* standin_deserializeCudaEngine(
    void* runtime, const void* blob, size_t size, char* why, size_t why_size);
STANDIN_EXPORT void standin_destroyInferRuntime(void* runtime);

/* From libcudart (CUDA runtime API; cudaError_t is an int enum, 0 = cudaSuccess). */
int cudaGetDeviceCount(int* count);
const char* cudaGetErrorString(int error);
int cudaRuntimeGetVersion(int* version);

#endif
