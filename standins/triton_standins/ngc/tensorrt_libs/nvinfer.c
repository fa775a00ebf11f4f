/* libnvinfer.so.10 stand-in: the runtime entry points (version, runtime, deserialize). */
#include <stdio.h>
#include <stdlib.h>

#include "standin.h"

STANDIN_NOTE("libnvinfer.so.10");

typedef struct {
  int32_t version; /* the version the caller was built against */
} runtime;

int32_t getInferLibVersion(void) { return STANDIN_TRT_VERSION; }

void* createInferRuntime_INTERNAL(void* logger, int32_t version) {
  (void)logger;
  runtime* r = calloc(1, sizeof *r);
  if (r) r->version = version;
  return r;
}

void standin_destroyInferRuntime(void* r) { free(r); }

/* A plan is an engine compiled for one GPU: without a usable GPU there is nothing to run it
 * on, which is the reason a user must read. With a GPU the stand-in still cannot run it. */
void* standin_deserializeCudaEngine(void* r, const void* blob, size_t size, char* why, size_t why_size) {
  (void)blob;
  if (!r) {
    snprintf(why, why_size, "no runtime");
    return NULL;
  }
  int count = 0;
  int err = cudaGetDeviceCount(&count);
  if (err != 0)
    snprintf(why, why_size, "no GPU available (cudaGetDeviceCount: %s)", cudaGetErrorString(err));
  else if (count == 0)
    snprintf(why, why_size, "no GPU available (cudaGetDeviceCount: 0 devices)");
  else
    snprintf(why, why_size, "%zu-byte plan not deserialized: this TensorRT is a triton-composer stand-in that runs no engine", size);
  return NULL;
}
