/* See backend_common.h. BK_NAME (set by each build.sh) names the backend in messages. */
#include "backend_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef BK_NAME
#error "build with -DBK_NAME=\"<backend name>\""
#endif

static void format_message(char* msg, size_t size, const char* format, va_list args) {
  int n = snprintf(msg, size, "%s: ", BK_NAME);
  vsnprintf(msg + n, size - (size_t)n, format, args);
}

TRITONSERVER_Error* bk_error(TRITONSERVER_Error_Code code, const char* format, ...) {
  char msg[2048];
  va_list args;
  va_start(args, format);
  format_message(msg, sizeof msg, format, args);
  va_end(args);
  return TRITONSERVER_ErrorNew(code, msg);
}

void bk_log_at(TRITONSERVER_LogLevel level, const char* file, int line, const char* format, ...) {
  char msg[2048];
  va_list args;
  va_start(args, format);
  format_message(msg, sizeof msg, format, args);
  va_end(args);
  TRITONSERVER_Error* err = TRITONSERVER_LogMessage(level, file, line, msg);
  if (err) TRITONSERVER_ErrorDelete(err);
}

TRITONSERVER_Error* bk_check_api(const char* backend, uint32_t* major, uint32_t* minor) {
  TRITONSERVER_Error* err = TRITONBACKEND_ApiVersion(major, minor);
  if (err) return err;
  if (*major != BACKEND_API_MAJOR || *minor < BACKEND_API_MINOR)
    return bk_error(TRITONSERVER_ERROR_UNSUPPORTED, "the server's backend API is %u.%u, the %s backend needs %d.%d or a later 1.x",
                    *major, *minor, backend, BACKEND_API_MAJOR, BACKEND_API_MINOR);
  return NULL;
}

TRITONSERVER_Error* bk_read_config(TRITONBACKEND_Model* model, json** config) {
  TRITONSERVER_Message* message = NULL;
  TRITONSERVER_Error* err = TRITONBACKEND_ModelConfig(model, 1, &message);
  if (err) return err;
  const char* text = NULL;
  size_t size = 0;
  err = TRITONSERVER_MessageSerializeToJson(message, &text, &size);
  *config = err ? NULL : json_parse(text, size);
  TRITONSERVER_MessageDelete(message);
  if (!err && !*config) err = bk_error(TRITONSERVER_ERROR_INTERNAL, "the server's model configuration is not JSON");
  return err;
}

TRITONSERVER_Error* bk_set_config(TRITONBACKEND_Model* model, const json* config) {
  char* text = json_write(config);
  if (!text) return bk_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  TRITONSERVER_Message* message = NULL;
  TRITONSERVER_Error* err = TRITONSERVER_MessageNewFromSerializedJson(&message, text, strlen(text));
  free(text);
  if (!err) err = TRITONBACKEND_ModelSetConfig(model, 1, message);
  if (message) TRITONSERVER_MessageDelete(message);
  return err;
}

static const struct {
  const char* name;
  TRITONSERVER_DataType datatype;
  size_t size;
} types[] = {
    {"TYPE_BOOL", TRITONSERVER_TYPE_BOOL, 1},     {"TYPE_UINT8", TRITONSERVER_TYPE_UINT8, 1},
    {"TYPE_UINT16", TRITONSERVER_TYPE_UINT16, 2}, {"TYPE_UINT32", TRITONSERVER_TYPE_UINT32, 4},
    {"TYPE_UINT64", TRITONSERVER_TYPE_UINT64, 8}, {"TYPE_INT8", TRITONSERVER_TYPE_INT8, 1},
    {"TYPE_INT16", TRITONSERVER_TYPE_INT16, 2},   {"TYPE_INT32", TRITONSERVER_TYPE_INT32, 4},
    {"TYPE_INT64", TRITONSERVER_TYPE_INT64, 8},   {"TYPE_FP16", TRITONSERVER_TYPE_FP16, 2},
    {"TYPE_FP32", TRITONSERVER_TYPE_FP32, 4},     {"TYPE_FP64", TRITONSERVER_TYPE_FP64, 8},
    {"TYPE_STRING", TRITONSERVER_TYPE_BYTES, 0},  {"TYPE_BF16", TRITONSERVER_TYPE_BF16, 2},
};
#define N_TYPES (sizeof types / sizeof types[0])

TRITONSERVER_DataType bk_type_from_config(const char* name) {
  for (size_t i = 0; name && i < N_TYPES; i++)
    if (strcmp(types[i].name, name) == 0) return types[i].datatype;
  return TRITONSERVER_TYPE_INVALID;
}

const char* bk_type_to_config(TRITONSERVER_DataType datatype) {
  for (size_t i = 0; i < N_TYPES; i++)
    if (types[i].datatype == datatype) return types[i].name;
  return NULL;
}

size_t bk_type_size(TRITONSERVER_DataType datatype) {
  for (size_t i = 0; i < N_TYPES; i++)
    if (types[i].datatype == datatype) return types[i].size;
  return 0;
}

int64_t bk_max_batch_size(const json* config) {
  int64_t n = 0;
  return json_int(json_get(config, "max_batch_size"), &n) ? n : 0;
}

void bk_free_tensors(bk_tensor* tensors, int count) {
  for (int i = 0; tensors && i < count; i++) free(tensors[i].name);
  free(tensors);
}

TRITONSERVER_Error* bk_tensors(const json* config, const char* section, bk_tensor** tensors, int* count) {
  const json* list = json_get(config, section);
  int n = json_count(list);
  *tensors = calloc((size_t)n + 1, sizeof(bk_tensor));
  *count = 0;
  if (!*tensors) return bk_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  for (const json* e = n ? list->child : NULL; e; e = e->next) {
    bk_tensor* t = &(*tensors)[(*count)++];
    const char* name = json_str(json_get(e, "name"));
    const char* type = json_str(json_get(e, "data_type"));
    const json* dims = json_get(e, "dims");
    t->name = strdup(name ? name : "");
    t->datatype = bk_type_from_config(type);
    if (!t->name || !name || t->datatype == TRITONSERVER_TYPE_INVALID || json_count(dims) > BK_MAX_DIMS) {
      TRITONSERVER_Error* err = bk_error(TRITONSERVER_ERROR_INVALID_ARG, "%s '%s': needs a name, a data_type and at most %d dims (got type %s)",
                                         section, name ? name : "", BK_MAX_DIMS, type ? type : "none");
      bk_free_tensors(*tensors, *count);
      *tensors = NULL;
      *count = 0;
      return err;
    }
    for (const json* d = json_count(dims) ? dims->child : NULL; d; d = d->next)
      if (!json_int(d, &t->dims[t->dims_count++])) t->dims[t->dims_count - 1] = -1;
  }
  return NULL;
}

json* bk_tensor_json(const char* name, TRITONSERVER_DataType datatype, const int64_t* dims, int dims_count) {
  json* entry = json_new(JSON_OBJECT, NULL);
  int ok = entry && json_set(entry, "name", json_new(JSON_STRING, name)) &&
           json_set(entry, "data_type", json_new(JSON_STRING, bk_type_to_config(datatype))) &&
           json_set(entry, "dims", json_new(JSON_ARRAY, NULL)); /* each call owns what it is given */
  for (int i = 0; ok && i < dims_count; i++) ok = json_append(json_get(entry, "dims"), json_new_int(dims[i]));
  if (!ok) {
    json_free(entry);
    return NULL;
  }
  return entry;
}

TRITONSERVER_Error* bk_model_file(TRITONBACKEND_Model* model, const json* config, const char* fallback, char** path) {
  TRITONBACKEND_ArtifactType kind = 0;
  const char* repository = NULL;
  uint64_t version = 0;
  TRITONSERVER_Error* err = TRITONBACKEND_ModelRepository(model, &kind, &repository);
  if (!err) err = TRITONBACKEND_ModelVersion(model, &version);
  if (err) return err;
  if (kind != TRITONBACKEND_ARTIFACT_FILESYSTEM)
    return bk_error(TRITONSERVER_ERROR_UNSUPPORTED, "model artifacts must be files in a folder");
  const char* file = json_str(json_get(config, "default_model_filename"));
  if (!file || !*file) file = fallback;
  size_t size = strlen(repository) + strlen(file) + 32;
  *path = malloc(size);
  if (!*path) return bk_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  snprintf(*path, size, "%s/%llu/%s", repository, (unsigned long long)version, file);
  struct stat info;
  if (stat(*path, &info) != 0) {
    err = bk_error(TRITONSERVER_ERROR_NOT_FOUND, "model file %s not found", *path);
    free(*path);
    *path = NULL;
  }
  return err;
}

TRITONSERVER_Error* bk_read_input(TRITONBACKEND_Request* request, const char* name, bk_input* in) {
  TRITONBACKEND_Input* input = NULL;
  uint32_t buffers = 0;
  memset(in, 0, sizeof *in);
  TRITONSERVER_Error* err = TRITONBACKEND_RequestInput(request, name, &input);
  if (!err) err = TRITONBACKEND_InputProperties(input, NULL, &in->datatype, &in->shape, &in->dims_count, &in->byte_size, &buffers);
  if (err) return err;
  uint64_t elements = 1;
  for (uint32_t d = 0; d < in->dims_count; d++) elements *= in->shape[d] > 0 ? (uint64_t)in->shape[d] : 0;
  size_t item = bk_type_size(in->datatype);
  if (!item || elements * item != in->byte_size)
    return bk_error(TRITONSERVER_ERROR_INVALID_ARG, "input %s: %llu bytes do not make a tensor of its datatype and shape", name,
                    (unsigned long long)in->byte_size);
  in->data = malloc(in->byte_size ? in->byte_size : 1);
  if (!in->data) return bk_error(TRITONSERVER_ERROR_INTERNAL, "out of memory");
  uint64_t done = 0;
  for (uint32_t b = 0; b < buffers && !err; b++) {
    const void* part = NULL;
    uint64_t size = 0;
    TRITONSERVER_MemoryType where = TRITONSERVER_MEMORY_CPU;
    int64_t where_id = 0;
    err = TRITONBACKEND_InputBuffer(input, b, &part, &size, &where, &where_id);
    if (!err && where != TRITONSERVER_MEMORY_CPU && size)
      err = bk_error(TRITONSERVER_ERROR_UNSUPPORTED, "input %s is not in CPU memory", name);
    if (!err && done + size > in->byte_size) err = bk_error(TRITONSERVER_ERROR_INVALID_ARG, "input %s: more data than its shape", name);
    if (!err && size) memcpy((char*)in->data + done, part, size);
    done += size;
  }
  if (!err && done != in->byte_size) err = bk_error(TRITONSERVER_ERROR_INVALID_ARG, "input %s: less data than its shape", name);
  if (err) {
    free(in->data);
    in->data = NULL;
  }
  return err;
}

TRITONSERVER_Error* bk_write_output(TRITONBACKEND_Response* response, const char* name, TRITONSERVER_DataType datatype,
                                    const int64_t* shape, uint32_t dims_count, const void* data, uint64_t byte_size) {
  TRITONBACKEND_Output* output = NULL;
  void* buffer = NULL;
  TRITONSERVER_MemoryType where = TRITONSERVER_MEMORY_CPU;
  int64_t where_id = 0;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseOutput(response, &output, name, datatype, shape, dims_count);
  if (!err) err = TRITONBACKEND_OutputBuffer(output, &buffer, byte_size, &where, &where_id);
  if (!err && where != TRITONSERVER_MEMORY_CPU && byte_size)
    err = bk_error(TRITONSERVER_ERROR_UNSUPPORTED, "output %s is not in CPU memory", name);
  if (!err && byte_size) memcpy(buffer, data, byte_size);
  return err;
}

TRITONSERVER_Error* bk_execute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, uint32_t count,
                               bk_respond_fn respond) {
  TRITONBACKEND_Model* model = NULL;
  void* state = NULL;
  TRITONSERVER_Error* err = TRITONBACKEND_ModelInstanceModel(instance, &model);
  if (!err) err = TRITONBACKEND_ModelState(model, &state);
  if (err) return err; /* the requests stay with the server */
  for (uint32_t r = 0; r < count; r++) {
    TRITONBACKEND_Response* response = NULL;
    err = TRITONBACKEND_ResponseNew(&response, requests[r]);
    if (err) {
      bk_log(TRITONSERVER_LOG_ERROR, "cannot create a response: %s", TRITONSERVER_ErrorMessage(err));
      TRITONSERVER_ErrorDelete(err);
    } else {
      TRITONSERVER_Error* outcome = respond(state, requests[r], response);
      err = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, outcome);
      if (outcome) TRITONSERVER_ErrorDelete(outcome);
      if (err) {
        bk_log(TRITONSERVER_LOG_ERROR, "cannot send a response: %s", TRITONSERVER_ErrorMessage(err));
        TRITONSERVER_ErrorDelete(err);
      }
    }
    err = TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
    if (err) TRITONSERVER_ErrorDelete(err);
  }
  return NULL;
}
