/* The part of ONNX Runtime's C API the onnxruntime backend uses, declared by this project from
 * ONNX Runtime's public documentation (onnxruntime_c_api.h). The library exports one function,
 * OrtGetApiBase; everything else is reached through the OrtApi table of function pointers it
 * returns. That table only ever grows at its end, so a slot's position is fixed from the
 * version that added it: the slots used here are named at their positions, the others are
 * placeholders (`unused_N` holds N slots). GetApi(ORT_API_VERSION) returns NULL when the library
 * is older than the version asked for, which the backend checks before it uses any slot. */
#ifndef COMPOSER_ORT_API_H
#define COMPOSER_ORT_API_H

#include <stddef.h>
#include <stdint.h>

/* The version of ONNX Runtime 1.19's table. */
#define ORT_API_VERSION 19

typedef struct OrtStatus OrtStatus; /* NULL means success */
typedef struct OrtEnv OrtEnv;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtSession OrtSession;
typedef struct OrtValue OrtValue;
typedef struct OrtRunOptions OrtRunOptions;
typedef struct OrtTypeInfo OrtTypeInfo;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtAllocator OrtAllocator;

typedef enum {
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED = 0,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT = 1,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 = 2,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 = 3,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16 = 4,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16 = 5,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 = 6,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 = 7,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING = 8,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL = 9,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 = 10,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE = 11,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32 = 12,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64 = 13,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 = 16
} ONNXTensorElementDataType;

typedef enum { ORT_LOGGING_LEVEL_WARNING = 2 } OrtLoggingLevel;
typedef enum { OrtDeviceAllocator = 0, OrtArenaAllocator = 1 } OrtAllocatorType;
typedef enum { OrtMemTypeDefault = 0 } OrtMemType;

typedef void (*ort_unused)(void);

typedef struct OrtApi {
  /* 0 */ OrtStatus* (*CreateStatus)(int code, const char* msg);
  /* 1 */ int (*GetErrorCode)(const OrtStatus* status);
  /* 2 */ const char* (*GetErrorMessage)(const OrtStatus* status);
  /* 3 */ OrtStatus* (*CreateEnv)(OrtLoggingLevel level, const char* logid, OrtEnv** out);
  /* 4-6 */ ort_unused unused_4[3];
  /* 7 */ OrtStatus* (*CreateSession)(const OrtEnv* env, const char* model_path, const OrtSessionOptions* options,
                                      OrtSession** out);
  /* 8 */ ort_unused unused_8[1];
  /* 9 */ OrtStatus* (*Run)(OrtSession* session, const OrtRunOptions* run_options, const char* const* input_names,
                            const OrtValue* const* inputs, size_t input_len, const char* const* output_names,
                            size_t output_names_len, OrtValue** outputs);
  /* 10 */ OrtStatus* (*CreateSessionOptions)(OrtSessionOptions** options);
  /* 11-23 */ ort_unused unused_11[13];
  /* 24 */ OrtStatus* (*SetIntraOpNumThreads)(OrtSessionOptions* options, int intra_op_num_threads);
  /* 25-29 */ ort_unused unused_25[5];
  /* 30 */ OrtStatus* (*SessionGetInputCount)(const OrtSession* session, size_t* out);
  /* 31 */ OrtStatus* (*SessionGetOutputCount)(const OrtSession* session, size_t* out);
  /* 32 */ ort_unused unused_32[1];
  /* 33 */ OrtStatus* (*SessionGetInputTypeInfo)(const OrtSession* session, size_t index, OrtTypeInfo** type_info);
  /* 34 */ OrtStatus* (*SessionGetOutputTypeInfo)(const OrtSession* session, size_t index, OrtTypeInfo** type_info);
  /* 35 */ ort_unused unused_35[1];
  /* 36 */ OrtStatus* (*SessionGetInputName)(const OrtSession* session, size_t index, OrtAllocator* allocator, char** value);
  /* 37 */ OrtStatus* (*SessionGetOutputName)(const OrtSession* session, size_t index, OrtAllocator* allocator, char** value);
  /* 38-48 */ ort_unused unused_38[11];
  /* 49 */ OrtStatus* (*CreateTensorWithDataAsOrtValue)(const OrtMemoryInfo* info, void* p_data, size_t p_data_len,
                                                        const int64_t* shape, size_t shape_len,
                                                        ONNXTensorElementDataType type, OrtValue** out);
  /* 50 */ ort_unused unused_50[1];
  /* 51 */ OrtStatus* (*GetTensorMutableData)(OrtValue* value, void** out);
  /* 52-54 */ ort_unused unused_52[3];
  /* 55 */ OrtStatus* (*CastTypeInfoToTensorInfo)(const OrtTypeInfo* type_info, const OrtTensorTypeAndShapeInfo** out);
  /* 56-59 */ ort_unused unused_56[4];
  /* 60 */ OrtStatus* (*GetTensorElementType)(const OrtTensorTypeAndShapeInfo* info, ONNXTensorElementDataType* out);
  /* 61 */ OrtStatus* (*GetDimensionsCount)(const OrtTensorTypeAndShapeInfo* info, size_t* out);
  /* 62 */ OrtStatus* (*GetDimensions)(const OrtTensorTypeAndShapeInfo* info, int64_t* dim_values, size_t dim_values_length);
  /* 63 */ ort_unused unused_63[1];
  /* 64 */ OrtStatus* (*GetTensorShapeElementCount)(const OrtTensorTypeAndShapeInfo* info, size_t* out);
  /* 65 */ OrtStatus* (*GetTensorTypeAndShape)(const OrtValue* value, OrtTensorTypeAndShapeInfo** out);
  /* 66-68 */ ort_unused unused_66[3];
  /* 69 */ OrtStatus* (*CreateCpuMemoryInfo)(OrtAllocatorType type, OrtMemType mem_type, OrtMemoryInfo** out);
  /* 70-75 */ ort_unused unused_70[6];
  /* 76 */ OrtStatus* (*AllocatorFree)(OrtAllocator* allocator, void* p);
  /* 77 */ ort_unused unused_77[1];
  /* 78 */ OrtStatus* (*GetAllocatorWithDefaultOptions)(OrtAllocator** out);
  /* 79-91 */ ort_unused unused_79[13];
  /* 92 */ void (*ReleaseEnv)(OrtEnv* input);
  /* 93 */ void (*ReleaseStatus)(OrtStatus* input);
  /* 94 */ void (*ReleaseMemoryInfo)(OrtMemoryInfo* input);
  /* 95 */ void (*ReleaseSession)(OrtSession* input);
  /* 96 */ void (*ReleaseValue)(OrtValue* input);
  /* 97 */ ort_unused unused_97[1];
  /* 98 */ void (*ReleaseTypeInfo)(OrtTypeInfo* input);
  /* 99 */ void (*ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo* input);
  /* 100 */ void (*ReleaseSessionOptions)(OrtSessionOptions* input);
  /* later slots are not used */
} OrtApi;

typedef struct OrtApiBase {
  const OrtApi* (*GetApi)(uint32_t version); /* NULL when the library lacks that version */
  const char* (*GetVersionString)(void);
} OrtApiBase;

/* The one function libonnxruntime.so.1 exports for the C API. */
const OrtApiBase* OrtGetApiBase(void);

#endif
