/* libtriton_onnxruntime.so: Triton's onnxruntime backend as the NGC-scale stand-in has it,
 * written by triton-composer in C over ONNX Runtime's C API. It links libonnxruntime.so.1 from
 * its own folder (RUNPATH $ORIGIN), as NGC's backend does; ONNX Runtime loads its execution
 * providers (shared, CUDA, TensorRT) from that folder by name when asked. This backend runs
 * models on the CPU only: no provider is asked for, so none is loaded.
 *
 * Auto-complete (a model without config.pbtxt, or one without inputs or outputs): the missing
 * "input" / "output" sections are made from the model's own inputs and outputs. When both were
 * missing, max_batch_size is not set, and every input and output has a dynamic first dimension,
 * the model is taken to batch, as Triton's onnxruntime backend does: max_batch_size becomes 4
 * (its default-max-batch-size), that first dimension leaves the dims, and dynamic batching is
 * turned on. Otherwise max_batch_size stays as configured and dims are the model's own. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_common.h"
#include "ort_api.h"

#define DEFAULT_MAX_BATCH_SIZE 4

/* The table positions of ort_api.h, checked where the compiler can: each named slot sits
 * where ONNX Runtime's table has it. */
#define SLOT(name, n) _Static_assert(offsetof(OrtApi, name) == (n) * sizeof(void*), #name " is slot " #n)
SLOT(GetErrorMessage, 2);
SLOT(CreateSession, 7);
SLOT(Run, 9);
SLOT(SetIntraOpNumThreads, 24);
SLOT(SessionGetInputName, 36);
SLOT(CreateTensorWithDataAsOrtValue, 49);
SLOT(CastTypeInfoToTensorInfo, 55);
SLOT(GetTensorTypeAndShape, 65);
SLOT(CreateCpuMemoryInfo, 69);
SLOT(GetAllocatorWithDefaultOptions, 78);
SLOT(ReleaseEnv, 92);
SLOT(ReleaseSessionOptions, 100);

static const OrtApi* ort;
static OrtEnv* env;
static OrtMemoryInfo* cpu_memory;

/* Turns an ONNX Runtime status into a Triton error (NULL stays NULL) and frees it. */
static TRITONSERVER_Error* check(OrtStatus* status, const char* what) {
  if (!status) return NULL;
  TRITONSERVER_Error* err = bk_error(TRITONSERVER_ERROR_INTERNAL, "%s: %s", what, ort->GetErrorMessage(status));
  ort->ReleaseStatus(status);
  return err;
}

static const struct {
  ONNXTensorElementDataType onnx;
  TRITONSERVER_DataType triton;
} type_pairs[] = {
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, TRITONSERVER_TYPE_FP32},   {ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE, TRITONSERVER_TYPE_FP64},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, TRITONSERVER_TYPE_FP16}, {ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16, TRITONSERVER_TYPE_BF16},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8, TRITONSERVER_TYPE_INT8},    {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16, TRITONSERVER_TYPE_INT16},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, TRITONSERVER_TYPE_INT32},  {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, TRITONSERVER_TYPE_INT64},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, TRITONSERVER_TYPE_UINT8},  {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16, TRITONSERVER_TYPE_UINT16},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32, TRITONSERVER_TYPE_UINT32}, {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64, TRITONSERVER_TYPE_UINT64},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL, TRITONSERVER_TYPE_BOOL},
};

static TRITONSERVER_DataType to_triton(ONNXTensorElementDataType t) {
  for (size_t i = 0; i < sizeof type_pairs / sizeof type_pairs[0]; i++)
    if (type_pairs[i].onnx == t) return type_pairs[i].triton;
  return TRITONSERVER_TYPE_INVALID; /* strings and the rest: not served */
}

static ONNXTensorElementDataType to_onnx(TRITONSERVER_DataType t) {
  for (size_t i = 0; i < sizeof type_pairs / sizeof type_pairs[0]; i++)
    if (type_pairs[i].triton == t) return type_pairs[i].onnx;
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  uint32_t major = 0, minor = 0;
  TRITONSERVER_Error* err = bk_check_api("onnxruntime", &major, &minor);
  if (err) return err;
  const OrtApiBase* base = OrtGetApiBase();
  const char* version = base->GetVersionString();
  ort = base->GetApi(ORT_API_VERSION);
  if (!ort)
    return bk_error(TRITONSERVER_ERROR_UNSUPPORTED, "ONNX Runtime %s lacks C API version %d (ONNX Runtime 1.19 or later needed)",
                    version, ORT_API_VERSION);
  /* The table's positions, checked against the library itself: a status made through slot 0
   * must read back through slots 1 and 2 (and be freed through slot 93). */
  OrtStatus* probe = ort->CreateStatus(2, "slot probe");
  int probe_ok = probe && ort->GetErrorCode(probe) == 2 && strcmp(ort->GetErrorMessage(probe), "slot probe") == 0;
  if (probe) ort->ReleaseStatus(probe);
  if (!probe_ok) return bk_error(TRITONSERVER_ERROR_INTERNAL, "ONNX Runtime %s's C API table is not laid out as expected", version);
  err = check(ort->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "triton", &env), "cannot create the ONNX Runtime environment");
  if (!err) err = check(ort->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &cpu_memory), "cannot describe CPU memory");
  if (err) return err;
  bk_log(TRITONSERVER_LOG_INFO, "ONNX Runtime version %s (C API %d), backend API %u.%u, CPU execution", version, ORT_API_VERSION,
         major, minor);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  if (cpu_memory) ort->ReleaseMemoryInfo(cpu_memory);
  if (env) ort->ReleaseEnv(env);
  cpu_memory = NULL;
  env = NULL;
  return NULL;
}

/* One input or output of the ONNX model, as the model declares it. */
typedef struct {
  char* name;
  TRITONSERVER_DataType datatype;
  int64_t dims[BK_MAX_DIMS];
  int dims_count;
} model_io;

typedef struct {
  OrtSession* session;
  model_io* inputs;
  size_t n_inputs;
  model_io* outputs;
  size_t n_outputs;
} model_state;

static void free_io(model_io* io, size_t n) {
  for (size_t i = 0; io && i < n; i++) free(io[i].name);
  free(io);
}

static void free_state(model_state* s) {
  if (!s) return;
  if (s->session) ort->ReleaseSession(s->session);
  free_io(s->inputs, s->n_inputs);
  free_io(s->outputs, s->n_outputs);
  free(s);
}

/* The model's inputs (or outputs): names, datatypes, dims (-1 where dynamic). */
static TRITONSERVER_Error* describe(OrtSession* session, int outputs, model_io** io, size_t* n) {
  OrtAllocator* allocator = NULL;
  TRITONSERVER_Error* err = check(ort->GetAllocatorWithDefaultOptions(&allocator), "no allocator");
  if (!err) err = check((outputs ? ort->SessionGetOutputCount : ort->SessionGetInputCount)(session, n), "cannot count tensors");
  if (err) return err;
  *io = calloc(*n + 1, sizeof(model_io));
  if (!*io) return bk_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  for (size_t i = 0; i < *n && !err; i++) {
    char* name = NULL;
    OrtTypeInfo* info = NULL;
    const OrtTensorTypeAndShapeInfo* tensor = NULL;
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t rank = 0;
    err = check((outputs ? ort->SessionGetOutputName : ort->SessionGetInputName)(session, i, allocator, &name), "no tensor name");
    if (!err) {
      (*io)[i].name = strdup(name);
      err = check(ort->AllocatorFree(allocator, name), "cannot free a name");
    }
    if (!err) err = check((outputs ? ort->SessionGetOutputTypeInfo : ort->SessionGetInputTypeInfo)(session, i, &info), "no type");
    if (!err) err = check(ort->CastTypeInfoToTensorInfo(info, &tensor), "not a tensor");
    if (!err && !tensor) err = bk_error(TRITONSERVER_ERROR_UNSUPPORTED, "%s is not a tensor", (*io)[i].name);
    if (!err) err = check(ort->GetTensorElementType(tensor, &type), "no element type");
    if (!err) err = check(ort->GetDimensionsCount(tensor, &rank), "no rank");
    if (!err && rank > BK_MAX_DIMS) err = bk_error(TRITONSERVER_ERROR_UNSUPPORTED, "%s has %zu dims", (*io)[i].name, rank);
    if (!err) err = check(ort->GetDimensions(tensor, (*io)[i].dims, rank), "no dims");
    if (!err) {
      (*io)[i].dims_count = (int)rank;
      (*io)[i].datatype = to_triton(type);
      for (size_t d = 0; d < rank; d++)
        if ((*io)[i].dims[d] < 0) (*io)[i].dims[d] = -1;
      if ((*io)[i].datatype == TRITONSERVER_TYPE_INVALID)
        err = bk_error(TRITONSERVER_ERROR_UNSUPPORTED, "%s has ONNX element type %d, which this backend does not serve",
                       (*io)[i].name, (int)type);
    }
    if (info) ort->ReleaseTypeInfo(info);
  }
  return err;
}

static int batches(const model_io* io, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (io[i].dims_count < 1 || io[i].dims[0] != -1) return 0;
  return 1;
}

static json* section_from(const model_io* io, size_t n, int skip_first) {
  json* list = json_new(JSON_ARRAY, NULL);
  for (size_t i = 0; list && i < n; i++)
    if (!json_append(list, bk_tensor_json(io[i].name, io[i].datatype, io[i].dims + skip_first, io[i].dims_count - skip_first))) {
      json_free(list);
      list = NULL;
    }
  return list;
}

/* Auto-complete (see the top of this file). Returns whether `config` changed, -1 on failure. */
static int complete(json* config, const model_state* s) {
  int want_in = json_count(json_get(config, "input")) == 0, want_out = json_count(json_get(config, "output")) == 0;
  if (!want_in && !want_out) return 0;
  int batch = want_in && want_out && bk_max_batch_size(config) == 0 && batches(s->inputs, s->n_inputs) &&
              batches(s->outputs, s->n_outputs);
  if (batch) {
    if (!json_set(config, "max_batch_size", json_new_int(DEFAULT_MAX_BATCH_SIZE))) return -1;
    if (!json_get(config, "dynamic_batching") && !json_get(config, "sequence_batching") &&
        !json_set(config, "dynamic_batching", json_new(JSON_OBJECT, NULL)))
      return -1;
  }
  int skip = bk_max_batch_size(config) > 0 ? 1 : 0;
  if (want_in && !json_set(config, "input", section_from(s->inputs, s->n_inputs, skip))) return -1;
  if (want_out && !json_set(config, "output", section_from(s->outputs, s->n_outputs, skip))) return -1;
  return 1;
}

static const model_io* find_io(const model_io* io, size_t n, const char* name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(io[i].name, name) == 0) return &io[i];
  return NULL;
}

/* Every configured input and output must be the model's, with the model's datatype. */
static TRITONSERVER_Error* validate(const json* config, const model_state* s) {
  static const char* sections[] = {"input", "output"};
  TRITONSERVER_Error* err = NULL;
  for (int k = 0; k < 2 && !err; k++) {
    bk_tensor* tensors = NULL;
    int count = 0;
    err = bk_tensors(config, sections[k], &tensors, &count);
    for (int i = 0; i < count && !err; i++) {
      const model_io* io = k ? find_io(s->outputs, s->n_outputs, tensors[i].name) : find_io(s->inputs, s->n_inputs, tensors[i].name);
      if (!io)
        err = bk_error(TRITONSERVER_ERROR_INVALID_ARG, "configuration %s '%s' is not one of the ONNX model's", sections[k], tensors[i].name);
      else if (io->datatype != tensors[i].datatype)
        err = bk_error(TRITONSERVER_ERROR_INVALID_ARG, "configuration %s '%s' is %s, the ONNX model's is %s", sections[k],
                       tensors[i].name, bk_type_to_config(tensors[i].datatype), bk_type_to_config(io->datatype));
    }
    bk_free_tensors(tensors, count);
  }
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  json* config = NULL;
  char* path = NULL;
  OrtSessionOptions* options = NULL;
  bool auto_complete = false;
  model_state* s = calloc(1, sizeof *s);
  if (!s) return bk_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  TRITONSERVER_Error* err = bk_read_config(model, &config);
  if (!err) err = bk_model_file(model, config, "model.onnx", &path);
  if (!err) err = check(ort->CreateSessionOptions(&options), "cannot make session options");
  if (!err) err = check(ort->CreateSession(env, path, options, &s->session), path);
  if (!err) err = describe(s->session, 0, &s->inputs, &s->n_inputs);
  if (!err) err = describe(s->session, 1, &s->outputs, &s->n_outputs);
  if (!err) err = TRITONBACKEND_ModelAutoCompleteConfig(model, &auto_complete);
  if (!err && auto_complete) {
    int changed = complete(config, s);
    if (changed < 0) err = bk_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
    if (changed > 0) err = bk_set_config(model, config);
  }
  if (!err) err = validate(config, s);
  if (!err) err = TRITONBACKEND_ModelSetState(model, s);
  if (options) ort->ReleaseSessionOptions(options);
  if (!err) {
    const char* name = "?";
    TRITONBACKEND_ModelName(model, &name);
    bk_log(TRITONSERVER_LOG_INFO, "model '%s': %s, %zu inputs, %zu outputs, max_batch_size %lld", name, path, s->n_inputs,
           s->n_outputs, (long long)bk_max_batch_size(config));
  } else {
    free_state(s);
  }
  free(path);
  json_free(config);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* s = NULL;
  TRITONSERVER_Error* err = TRITONBACKEND_ModelState(model, &s);
  if (!err) free_state((model_state*)s);
  return err;
}

/* One request: every model input from the request, one Run, the requested outputs back. */
static TRITONSERVER_Error* respond(void* state, TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  model_state* s = state;
  size_t n_in = s->n_inputs, n_out = s->n_outputs;
  bk_input* data = calloc(n_in + 1, sizeof(bk_input));
  OrtValue** inputs = calloc(n_in + 1, sizeof(OrtValue*));
  OrtValue** outputs = calloc(n_out + 1, sizeof(OrtValue*));
  const char** in_names = calloc(n_in + 1, sizeof(char*));
  const char** out_names = calloc(n_out + 1, sizeof(char*));
  TRITONSERVER_Error* err = NULL;
  if (!data || !inputs || !outputs || !in_names || !out_names) err = bk_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  for (size_t i = 0; i < n_in && !err; i++) {
    const model_io* io = &s->inputs[i];
    in_names[i] = io->name;
    err = bk_read_input(request, io->name, &data[i]);
    if (!err && data[i].datatype != io->datatype)
      err = bk_error(TRITONSERVER_ERROR_INVALID_ARG, "input %s is %s, the model takes %s", io->name,
                     bk_type_to_config(data[i].datatype), bk_type_to_config(io->datatype));
    if (!err)
      err = check(ort->CreateTensorWithDataAsOrtValue(cpu_memory, data[i].data, data[i].byte_size, data[i].shape,
                                                      data[i].dims_count, to_onnx(io->datatype), &inputs[i]),
                  io->name);
  }
  for (size_t o = 0; o < n_out; o++) out_names[o] = s->outputs[o].name;
  if (!err)
    err = check(ort->Run(s->session, NULL, in_names, (const OrtValue* const*)inputs, n_in, out_names, n_out, outputs),
                "inference failed");
  uint32_t wanted = 0;
  if (!err) err = TRITONBACKEND_RequestOutputCount(request, &wanted);
  for (uint32_t k = 0; k < wanted && !err; k++) {
    const char* name = NULL;
    size_t o = 0;
    err = TRITONBACKEND_RequestOutputName(request, k, &name);
    while (!err && o < n_out && strcmp(out_names[o], name) != 0) o++;
    if (!err && o == n_out) err = bk_error(TRITONSERVER_ERROR_INVALID_ARG, "unknown output %s", name);
    OrtTensorTypeAndShapeInfo* info = NULL;
    int64_t shape[BK_MAX_DIMS];
    size_t rank = 0, elements = 0;
    void* bytes = NULL;
    if (!err) err = check(ort->GetTensorTypeAndShape(outputs[o], &info), name);
    if (!err) err = check(ort->GetDimensionsCount(info, &rank), name);
    if (!err && rank > BK_MAX_DIMS) err = bk_error(TRITONSERVER_ERROR_UNSUPPORTED, "output %s has %zu dims", name, rank);
    if (!err) err = check(ort->GetDimensions(info, shape, rank), name);
    if (!err) err = check(ort->GetTensorShapeElementCount(info, &elements), name);
    if (!err) err = check(ort->GetTensorMutableData(outputs[o], &bytes), name);
    if (!err)
      err = bk_write_output(response, name, s->outputs[o].datatype, shape, (uint32_t)rank, bytes,
                            (uint64_t)elements * bk_type_size(s->outputs[o].datatype));
    if (info) ort->ReleaseTensorTypeAndShapeInfo(info);
  }
  for (size_t i = 0; i < n_in; i++) {
    if (inputs && inputs[i]) ort->ReleaseValue(inputs[i]);
    if (data) free(data[i].data);
  }
  for (size_t o = 0; outputs && o < n_out; o++)
    if (outputs[o]) ort->ReleaseValue(outputs[o]);
  free(data);
  free(inputs);
  free(outputs);
  free(in_names);
  free(out_names);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count) {
  return bk_execute(instance, requests, request_count, respond);
}
