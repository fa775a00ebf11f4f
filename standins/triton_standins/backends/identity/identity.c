/* libtriton_identity.so: Triton's identity backend, written by triton-composer in C against
 * the Triton backend API, for the stand-in images. Each output answers an input with the
 * same datatype, shape and bytes (BYTES tensors included): OUTPUTn pairs with INPUTn by
 * name, the other outputs with the inputs left over, in the order of the configuration.
 *
 * Built the way NGC ships its backends, so the composer meets the same needs: it links
 * libidentity_config.so from its own folder (RUNPATH $ORIGIN), libgomp.so.1 from the
 * system (the copies run as an OpenMP loop), and loads libidentity_copy.so from its folder
 * at run time with dlopen (never a NEEDED entry). */
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "identity_config.h"
#include "triton_api.h"

#define PLUGIN "libidentity_copy.so"

typedef size_t (*copy_fn)(void*, size_t, const void* const*, const size_t*, size_t);

static void* plugin;
static copy_fn copy_buffers;

typedef struct {
  int count;
  char** inputs; /* inputs[i] answers outputs[i] */
  char** outputs;
} model_state;

typedef struct {
  void* dst;
  size_t size;
  const void** srcs;
  size_t* sizes;
  size_t count;
} copy_job;

static TRITONSERVER_Error* fail(TRITONSERVER_Error_Code code, const char* format, const char* a, const char* b) {
  char msg[1024];
  snprintf(msg, sizeof msg, format, a, b);
  return TRITONSERVER_ErrorNew(code, msg);
}

static void log_line(TRITONSERVER_LogLevel level, const char* msg) {
  TRITONSERVER_Error* err = TRITONSERVER_LogMessage(level, __FILE__, __LINE__, msg);
  if (err) TRITONSERVER_ErrorDelete(err);
}

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  uint32_t major = 0, minor = 0;
  TRITONSERVER_Error* err = TRITONBACKEND_ApiVersion(&major, &minor);
  if (err) return err;
  if (major != IDENTITY_API_MAJOR || minor < IDENTITY_API_MINOR) {
    char have[32], want[32];
    snprintf(have, sizeof have, "%u.%u", major, minor);
    snprintf(want, sizeof want, "%d.%d", IDENTITY_API_MAJOR, IDENTITY_API_MINOR);
    return fail(TRITONSERVER_ERROR_UNSUPPORTED,
                "identity backend: the server's backend API is %s, this backend needs %s or a later 1.x", have, want);
  }
  TRITONBACKEND_ArtifactType kind = 0;
  const char* folder = NULL;
  err = TRITONBACKEND_BackendArtifacts(backend, &kind, &folder);
  if (err) return err;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", folder ? folder : ".", PLUGIN);
  plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!plugin) return fail(TRITONSERVER_ERROR_INTERNAL, "identity backend: cannot load %s: %s", path, dlerror());
  copy_buffers = (copy_fn)dlsym(plugin, "identity_copy_buffers");
  if (!copy_buffers) return fail(TRITONSERVER_ERROR_INTERNAL, "identity backend: %s lacks %s", path, "identity_copy_buffers");
  char msg[4352];
  snprintf(msg, sizeof msg, "identity backend (triton-composer, C): API %u.%u, plugin %s, up to %d OpenMP threads",
           major, minor, path, omp_get_max_threads());
  log_line(TRITONSERVER_LOG_INFO, msg);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  if (plugin) dlclose(plugin);
  plugin = NULL;
  copy_buffers = NULL;
  return NULL;
}

static void free_state(model_state* state) {
  if (!state) return;
  if (state->inputs)
    for (int i = 0; i < state->count; i++) free(state->inputs[i]);
  free(state->inputs);
  idcfg_free_names(state->outputs, state->count);
  free(state);
}

/* Fills sources[o] with the input answering output o (see the top of this file).
 * Returns the first output left without an input, or NULL when every one has one. */
static const char* pair_up(char** inputs, int n_in, char** outputs, int n_out, const char** sources) {
  char* used = calloc((size_t)n_in + 1, 1);
  if (!used) return "(out of memory)";
  for (int o = 0; o < n_out; o++) {
    if (strncmp(outputs[o], "OUTPUT", 6) != 0) continue;
    for (int i = 0; i < n_in && !sources[o]; i++)
      if (!used[i] && strncmp(inputs[i], "INPUT", 5) == 0 && strcmp(inputs[i] + 5, outputs[o] + 6) == 0) {
        used[i] = 1;
        sources[o] = inputs[i];
      }
  }
  const char* missing = NULL;
  for (int o = 0, i = 0; o < n_out && !missing; o++) {
    if (sources[o]) continue;
    while (i < n_in && used[i]) i++;
    if (i < n_in) {
      used[i] = 1;
      sources[o] = inputs[i];
    } else {
      missing = outputs[o];
    }
  }
  free(used);
  return missing;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  const char* name = "?";
  TRITONBACKEND_ModelName(model, &name);
  TRITONSERVER_Message* config = NULL;
  TRITONSERVER_Error* err = TRITONBACKEND_ModelConfig(model, 1, &config);
  if (err) return err;
  const char* json = NULL;
  size_t size = 0;
  err = TRITONSERVER_MessageSerializeToJson(config, &json, &size);
  char **inputs = NULL, **outputs = NULL;
  int n_in = -1, n_out = -1;
  if (!err) {
    n_in = idcfg_tensor_names(json, size, "input", &inputs);
    n_out = idcfg_tensor_names(json, size, "output", &outputs);
  }
  TRITONSERVER_MessageDelete(config);
  if (err) return err;
  if (n_in < 0 || n_out < 0) {
    if (n_in > 0) idcfg_free_names(inputs, n_in);
    if (n_out > 0) idcfg_free_names(outputs, n_out);
    return fail(TRITONSERVER_ERROR_INTERNAL, "identity backend: cannot read the configuration of model %s%s", name, "");
  }
  model_state* state = calloc(1, sizeof *state);
  const char** sources = calloc((size_t)n_out + 1, sizeof(char*));
  const char* missing = (!state || !sources) ? "(out of memory)"
                        : n_in < 1           ? "(the model has no inputs)"
                        : n_out < 1          ? "(the model has no outputs)"
                                             : pair_up(inputs, n_in, outputs, n_out, sources);
  if (state) {
    state->outputs = outputs;
    state->count = n_out;
    state->inputs = calloc((size_t)n_out + 1, sizeof(char*));
    for (int o = 0; !missing && o < n_out; o++)
      if (!state->inputs || !(state->inputs[o] = strdup(sources[o]))) missing = "(out of memory)";
  } else if (n_out > 0) {
    idcfg_free_names(outputs, n_out);
  }
  free(sources);
  if (n_in > 0) idcfg_free_names(inputs, n_in);
  if (missing) {
    char what[512];
    snprintf(what, sizeof what, "%s", missing);
    free_state(state);
    return fail(TRITONSERVER_ERROR_INVALID_ARG, "identity backend: model %s: no input answers output %s", name, what);
  }
  return TRITONBACKEND_ModelSetState(model, state);
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state = NULL;
  TRITONSERVER_Error* err = TRITONBACKEND_ModelState(model, &state);
  if (err) return err;
  free_state((model_state*)state);
  return NULL;
}

/* Declares one requested output and gathers its copy job; the copies run afterwards. */
static TRITONSERVER_Error* prepare(model_state* state, TRITONBACKEND_Request* request,
                                   TRITONBACKEND_Response* response, copy_job* job, const char* output) {
  int pair = -1;
  for (int i = 0; i < state->count; i++)
    if (strcmp(state->outputs[i], output) == 0) pair = i;
  if (pair < 0) return fail(TRITONSERVER_ERROR_INVALID_ARG, "identity backend: unknown output %s%s", output, "");
  TRITONBACKEND_Input* input = NULL;
  TRITONSERVER_Error* err = TRITONBACKEND_RequestInput(request, state->inputs[pair], &input);
  if (err) return err;
  TRITONSERVER_DataType datatype;
  const int64_t* shape = NULL;
  uint32_t dims = 0, buffers = 0;
  uint64_t bytes = 0;
  err = TRITONBACKEND_InputProperties(input, NULL, &datatype, &shape, &dims, &bytes, &buffers);
  if (err) return err;
  TRITONBACKEND_Output* out = NULL;
  err = TRITONBACKEND_ResponseOutput(response, &out, output, datatype, shape, dims);
  if (err) return err;
  TRITONSERVER_MemoryType where = TRITONSERVER_MEMORY_CPU;
  int64_t where_id = 0;
  err = TRITONBACKEND_OutputBuffer(out, &job->dst, bytes, &where, &where_id);
  if (err) return err;
  if (where != TRITONSERVER_MEMORY_CPU && bytes > 0)
    return fail(TRITONSERVER_ERROR_UNSUPPORTED, "identity backend: output %s is not in CPU memory%s", output, "");
  job->size = bytes;
  job->count = buffers;
  job->srcs = calloc((size_t)buffers + 1, sizeof(void*));
  job->sizes = calloc((size_t)buffers + 1, sizeof(size_t));
  if (!job->srcs || !job->sizes) return fail(TRITONSERVER_ERROR_INTERNAL, "identity backend: out of memory%s%s", "", "");
  for (uint32_t b = 0; b < buffers; b++) {
    uint64_t size = 0;
    where = TRITONSERVER_MEMORY_CPU;
    where_id = 0;
    err = TRITONBACKEND_InputBuffer(input, b, &job->srcs[b], &size, &where, &where_id);
    if (err) return err;
    if (where != TRITONSERVER_MEMORY_CPU && size > 0)
      return fail(TRITONSERVER_ERROR_UNSUPPORTED, "identity backend: input %s is not in CPU memory%s",
                  state->inputs[pair], "");
    job->sizes[b] = size;
  }
  return NULL;
}

static TRITONSERVER_Error* respond(model_state* state, TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  uint32_t n = 0;
  TRITONSERVER_Error* err = TRITONBACKEND_RequestOutputCount(request, &n);
  if (err) return err;
  copy_job* jobs = calloc((size_t)n + 1, sizeof(copy_job));
  if (!jobs) return fail(TRITONSERVER_ERROR_INTERNAL, "identity backend: out of memory%s%s", "", "");
  for (uint32_t k = 0; k < n && !err; k++) {
    const char* output = NULL;
    err = TRITONBACKEND_RequestOutputName(request, k, &output);
    if (!err) err = prepare(state, request, response, &jobs[k], output);
  }
  if (!err) {
    int short_copy = 0;
    /* One output per iteration; libgomp spreads them over threads when there are several. */
#pragma omp parallel for schedule(dynamic) if (n > 1) reduction(| : short_copy)
    for (uint32_t k = 0; k < n; k++) {
      if (copy_buffers(jobs[k].dst, jobs[k].size, jobs[k].srcs, jobs[k].sizes, jobs[k].count) != jobs[k].size)
        short_copy |= 1;
    }
    if (short_copy)
      err = fail(TRITONSERVER_ERROR_INVALID_ARG, "identity backend: input data does not match its size%s%s", "", "");
  }
  for (uint32_t k = 0; k < n; k++) {
    free(jobs[k].srcs);
    free(jobs[k].sizes);
  }
  free(jobs);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count) {
  TRITONBACKEND_Model* model = NULL;
  void* state = NULL;
  TRITONSERVER_Error* err = TRITONBACKEND_ModelInstanceModel(instance, &model);
  if (!err) err = TRITONBACKEND_ModelState(model, &state);
  if (err) return err; /* the requests stay with the server */
  for (uint32_t r = 0; r < request_count; r++) {
    TRITONBACKEND_Response* response = NULL;
    err = TRITONBACKEND_ResponseNew(&response, requests[r]);
    if (err) {
      log_line(TRITONSERVER_LOG_ERROR, "identity backend: cannot create a response");
      TRITONSERVER_ErrorDelete(err);
    } else {
      TRITONSERVER_Error* outcome = respond((model_state*)state, requests[r], response);
      err = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, outcome);
      if (outcome) TRITONSERVER_ErrorDelete(outcome);
      if (err) {
        log_line(TRITONSERVER_LOG_ERROR, "identity backend: cannot send a response");
        TRITONSERVER_ErrorDelete(err);
      }
    }
    err = TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
    if (err) TRITONSERVER_ErrorDelete(err);
  }
  return NULL;
}
