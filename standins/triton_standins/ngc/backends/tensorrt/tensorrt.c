/* libtriton_tensorrt.so: Triton's tensorrt backend as the NGC-scale stand-in has it, written
 * by triton-composer in C. Linked to TensorRT's libraries by soname (libnvinfer.so.10 and
 * libnvinfer_plugin.so.10, found on the system library path as in NGC's min image), it loads,
 * states TensorRT's version, and on loading a tensorrt_plan model asks TensorRT to deserialize
 * the plan: on a host without a GPU that fails, and the model is refused with the reason. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend_common.h"

/* TensorRT's C entry points (libnvinfer, libnvinfer_plugin), declared by this project from
 * TensorRT's documentation; the deserialize call is the stand-in's C form of
 * IRuntime::deserializeCudaEngine (see composer/standin/ngc/tensorrt_libs/standin.h). */
int32_t getInferLibVersion(void);
void* createInferRuntime_INTERNAL(void* logger, int32_t version);
void* standin_deserializeCudaEngine(void* runtime, const void* blob, size_t size, char* why, size_t why_size);
void standin_destroyInferRuntime(void* runtime);
bool initLibNvInferPlugins(void* logger, const char* lib_namespace);

/* The TensorRT version this backend was built for, in getInferLibVersion's encoding. */
#ifndef TRT_MINOR
#error "build.sh passes TRT_MINOR and TRT_PATCH"
#endif
#define BUILT_FOR_TRT (10 * 10000 + TRT_MINOR * 100 + TRT_PATCH)

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  uint32_t major = 0, minor = 0;
  TRITONSERVER_Error* err = bk_check_api("tensorrt", &major, &minor);
  if (err) return err;
  int32_t v = getInferLibVersion();
  /* A backend linked against one TensorRT and run with another fails on plans (server
   * issue 8462): say so at start rather than at the first model. */
  if (v / 100 != BUILT_FOR_TRT / 100)
    return bk_error(TRITONSERVER_ERROR_UNSUPPORTED, "built for TensorRT 10.%d, but libnvinfer.so.10 is TensorRT %d.%d.%d",
                    TRT_MINOR, v / 10000, v / 100 % 100, v % 100);
  if (!initLibNvInferPlugins(NULL, ""))
    return bk_error(TRITONSERVER_ERROR_INTERNAL, "TensorRT's plugin library did not initialize");
  bk_log(TRITONSERVER_LOG_INFO, "TensorRT version %d.%d.%d (getInferLibVersion %d), backend API %u.%u", v / 10000,
         v / 100 % 100, v % 100, (int)v, major, minor);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  return NULL;
}

static TRITONSERVER_Error* read_file(const char* path, void** data, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return bk_error(TRITONSERVER_ERROR_NOT_FOUND, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *data = n >= 0 ? malloc((size_t)n + 1) : NULL;
  *size = *data && fread(*data, 1, (size_t)n, f) == (size_t)n ? (size_t)n : 0;
  fclose(f);
  if (!*data || *size != (size_t)n) {
    free(*data);
    return bk_error(TRITONSERVER_ERROR_INTERNAL, "cannot read %s", path);
  }
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  const char* name = "?";
  TRITONBACKEND_ModelName(model, &name);
  json* config = NULL;
  char* path = NULL;
  void* plan = NULL;
  size_t size = 0;
  TRITONSERVER_Error* err = bk_read_config(model, &config);
  if (!err) err = bk_model_file(model, config, "model.plan", &path);
  if (!err) err = read_file(path, &plan, &size);
  json_free(config);
  free(path);
  if (err) return err;
  void* runtime = createInferRuntime_INTERNAL(NULL, BUILT_FOR_TRT);
  char why[512] = "TensorRT could not make a runtime";
  void* engine = runtime ? standin_deserializeCudaEngine(runtime, plan, size, why, sizeof why) : NULL;
  free(plan);
  standin_destroyInferRuntime(runtime);
  if (!engine)
    return bk_error(TRITONSERVER_ERROR_UNAVAILABLE, "cannot load plan model '%s': %s; TensorRT plans run only on a GPU", name, why);
  return bk_error(TRITONSERVER_ERROR_INTERNAL, "cannot load plan model '%s': unexpected engine from a stand-in TensorRT", name);
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  (void)model;
  return NULL;
}

/* No model ever loads (see ModelInitialize), so no request can reach this. */
static TRITONSERVER_Error* respond(void* state, TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  (void)state;
  (void)request;
  (void)response;
  return bk_error(TRITONSERVER_ERROR_UNAVAILABLE, "TensorRT plans run only on a GPU");
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count) {
  return bk_execute(instance, requests, request_count, respond);
}
