/* What the NGC-scale stand-in backends share: errors and log lines, reading a model's
 * configuration and tensors, locating its file, and the request loop around a backend's
 * own "answer one request" function. */
#ifndef COMPOSER_BACKEND_COMMON_H
#define COMPOSER_BACKEND_COMMON_H

#include "json.h"
#include "triton_backend_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BK_MAX_DIMS 16

/* printf-style error and log line; every message starts with the backend's name. */
TRITONSERVER_Error* bk_error(TRITONSERVER_Error_Code code, const char* format, ...)
    __attribute__((format(printf, 2, 3)));
/* bk_log(level, format, ...): a log line that names the backend's source file and line. */
#define bk_log(level, ...) bk_log_at(level, __FILE_NAME__, __LINE__, __VA_ARGS__)
void bk_log_at(TRITONSERVER_LogLevel level, const char* file, int line, const char* format, ...)
    __attribute__((format(printf, 4, 5)));
/* The server's backend API must be 1.x with x >= BACKEND_API_MINOR. */
TRITONSERVER_Error* bk_check_api(const char* backend, uint32_t* major, uint32_t* minor);

/* One input or output of the configuration. */
typedef struct {
  char* name;
  TRITONSERVER_DataType datatype;
  int64_t dims[BK_MAX_DIMS];
  int dims_count;
} bk_tensor;

TRITONSERVER_Error* bk_read_config(TRITONBACKEND_Model* model, json** config);
/* Sends `config` back as the model's completed configuration (auto-complete). */
TRITONSERVER_Error* bk_set_config(TRITONBACKEND_Model* model, const json* config);
/* The entries of section "input" or "output"; *count 0 when the section is absent. */
TRITONSERVER_Error* bk_tensors(const json* config, const char* section, bk_tensor** tensors, int* count);
void bk_free_tensors(bk_tensor* tensors, int count);
/* A configuration entry made from a model's own description (auto-complete). */
json* bk_tensor_json(const char* name, TRITONSERVER_DataType datatype, const int64_t* dims, int dims_count);
int64_t bk_max_batch_size(const json* config); /* 0 when absent */

/* "TYPE_FP32" <-> TRITONSERVER_TYPE_FP32; INVALID / NULL when unknown. */
TRITONSERVER_DataType bk_type_from_config(const char* name);
const char* bk_type_to_config(TRITONSERVER_DataType datatype);
size_t bk_type_size(TRITONSERVER_DataType datatype); /* 0 for BYTES and INVALID */

/* <repository>/<version>/<default_model_filename or fallback>, malloc'd; the file must exist. */
TRITONSERVER_Error* bk_model_file(TRITONBACKEND_Model* model, const json* config, const char* fallback, char** path);

/* A request's input as one malloc'd buffer (the caller frees *data), checked against its
 * datatype and shape. */
typedef struct {
  TRITONSERVER_DataType datatype;
  const int64_t* shape;
  uint32_t dims_count;
  void* data;
  uint64_t byte_size;
} bk_input;
TRITONSERVER_Error* bk_read_input(TRITONBACKEND_Request* request, const char* name, bk_input* input);
TRITONSERVER_Error* bk_write_output(TRITONBACKEND_Response* response, const char* name, TRITONSERVER_DataType datatype,
                                    const int64_t* shape, uint32_t dims_count, const void* data, uint64_t byte_size);

/* Answers each request with the backend's function, sends the response (with the error the
 * function returned, if any), then releases the request: the whole execute step. */
typedef TRITONSERVER_Error* (*bk_respond_fn)(void* model_state, TRITONBACKEND_Request* request,
                                             TRITONBACKEND_Response* response);
TRITONSERVER_Error* bk_execute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
                               uint32_t count, bk_respond_fn respond);

#ifdef __cplusplus
}
#endif

#endif
