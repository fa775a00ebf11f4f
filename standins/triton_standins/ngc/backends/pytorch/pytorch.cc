// libtriton_pytorch.so: Triton's pytorch backend as the NGC-scale stand-in has it, written by
// triton-composer in C++ over libtorch (the torch 2.5.1 CUDA wheel's libraries, laid next to
// it: RUNPATH $ORIGIN). It serves TorchScript models on the CPU with the naming users know:
// inputs `<name>__<i>` are forward()'s i-th argument, outputs `<name>__<k>` its k-th result
// (a tuple or list), a lone tensor result being output 0. Names without that suffix take their
// position in the configuration. Like Triton's pytorch backend, it completes no configuration:
// inputs and outputs must be in config.pbtxt.
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/version.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "backend_common.h"

namespace {

struct Tensor {
  std::string name;
  TRITONSERVER_DataType datatype;
  c10::ScalarType type;  // the same datatype, as torch names it
  size_t index;          // argument or result position
};

struct ModelState {
  std::string name;
  torch::jit::Module module;
  std::vector<Tensor> inputs, outputs;
};

struct TypePair {
  TRITONSERVER_DataType triton;
  c10::ScalarType torch;
};

constexpr TypePair kTypes[] = {
    {TRITONSERVER_TYPE_BOOL, c10::kBool},   {TRITONSERVER_TYPE_UINT8, c10::kByte},     {TRITONSERVER_TYPE_INT8, c10::kChar},
    {TRITONSERVER_TYPE_INT16, c10::kShort}, {TRITONSERVER_TYPE_INT32, c10::kInt},      {TRITONSERVER_TYPE_INT64, c10::kLong},
    {TRITONSERVER_TYPE_FP16, c10::kHalf},   {TRITONSERVER_TYPE_BF16, c10::kBFloat16}, {TRITONSERVER_TYPE_FP32, c10::kFloat},
    {TRITONSERVER_TYPE_FP64, c10::kDouble},
};

bool ToTorch(TRITONSERVER_DataType t, c10::ScalarType* out) {
  for (const auto& p : kTypes)
    if (p.triton == t) {
      *out = p.torch;
      return true;
    }
  return false;
}

// The position a name's `__<i>` suffix gives, or `fallback` without one.
size_t PositionOf(const std::string& name, size_t fallback) {
  size_t at = name.rfind("__");
  if (at == std::string::npos || at + 2 >= name.size()) return fallback;
  char* end = nullptr;
  unsigned long long n = std::strtoull(name.c_str() + at + 2, &end, 10);
  return *end ? fallback : static_cast<size_t>(n);
}

TRITONSERVER_Error* ReadTensors(const json* config, const char* section, std::vector<Tensor>* out) {
  bk_tensor* tensors = nullptr;
  int count = 0;
  TRITONSERVER_Error* err = bk_tensors(config, section, &tensors, &count);
  if (err) return err;
  for (int i = 0; i < count; i++) {
    c10::ScalarType type = c10::kFloat;
    if (!ToTorch(tensors[i].datatype, &type))
      err = bk_error(TRITONSERVER_ERROR_UNSUPPORTED, "%s '%s': %s is not a datatype this backend serves", section, tensors[i].name,
                     bk_type_to_config(tensors[i].datatype));
    out->push_back({tensors[i].name, tensors[i].datatype, type, PositionOf(tensors[i].name, static_cast<size_t>(i))});
  }
  bk_free_tensors(tensors, count);
  if (!err && count == 0)
    err = bk_error(TRITONSERVER_ERROR_INVALID_ARG, "the configuration has no %s: the pytorch backend does not complete it from the model", section);
  return err;
}

// libtorch reports through exceptions; Triton through error objects.
TRITONSERVER_Error* FromException(const char* what) {
  std::string text(what);
  size_t cut = text.find("\nException raised from");  // c10 appends a C++ backtrace
  return bk_error(TRITONSERVER_ERROR_INTERNAL, "%s", text.substr(0, cut).c_str());
}

TRITONSERVER_Error* Respond(void* state, TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  auto* s = static_cast<ModelState*>(state);
  try {
    c10::InferenceMode no_autograd;
    std::vector<c10::IValue> args(s->inputs.size());
    for (const auto& t : s->inputs) {
      if (t.index >= args.size())
        return bk_error(TRITONSERVER_ERROR_INVALID_ARG, "input %s: position %zu, but the model takes %zu inputs", t.name.c_str(), t.index,
                        args.size());
      bk_input in;
      TRITONSERVER_Error* err = bk_read_input(request, t.name.c_str(), &in);
      if (!err && in.datatype != t.datatype)
        err = bk_error(TRITONSERVER_ERROR_INVALID_ARG, "input %s is %s, the configuration says %s", t.name.c_str(),
                       bk_type_to_config(in.datatype), bk_type_to_config(t.datatype));
      if (err) {
        std::free(in.data);
        return err;
      }
      std::vector<int64_t> shape(in.shape, in.shape + in.dims_count);
      // The tensor takes ownership of the gathered buffer and frees it when it is done.
      args[t.index] = torch::from_blob(in.data, shape, [](void* p) { std::free(p); }, torch::TensorOptions().dtype(t.type));
    }
    c10::IValue result = s->module.forward(args);
    std::vector<torch::Tensor> results;
    if (result.isTensor()) {
      results.push_back(result.toTensor());
    } else if (result.isTuple()) {
      for (const auto& e : result.toTupleRef().elements()) results.push_back(e.toTensor());
    } else if (result.isList()) {
      for (const auto& e : result.toListRef()) results.push_back(e.toTensor());
    } else {
      return bk_error(TRITONSERVER_ERROR_UNSUPPORTED, "forward() returned %s, not tensors", result.tagKind().c_str());
    }
    uint32_t wanted = 0;
    TRITONSERVER_Error* err = TRITONBACKEND_RequestOutputCount(request, &wanted);
    for (uint32_t k = 0; k < wanted && !err; k++) {
      const char* name = nullptr;
      err = TRITONBACKEND_RequestOutputName(request, k, &name);
      if (err) break;
      const Tensor* t = nullptr;
      for (const auto& o : s->outputs)
        if (o.name == name) t = &o;
      if (!t) return bk_error(TRITONSERVER_ERROR_INVALID_ARG, "unknown output %s", name);
      if (t->index >= results.size())
        return bk_error(TRITONSERVER_ERROR_INVALID_ARG, "output %s: position %zu, but the model returned %zu", name, t->index, results.size());
      torch::Tensor out = results[t->index].to(torch::kCPU);
      if (out.scalar_type() != t->type)
        return bk_error(TRITONSERVER_ERROR_INVALID_ARG, "output %s is %s, the configuration says %s", name,
                        c10::toString(out.scalar_type()), bk_type_to_config(t->datatype));
      out = out.contiguous();
      std::vector<int64_t> shape(out.sizes().begin(), out.sizes().end());
      err = bk_write_output(response, name, t->datatype, shape.data(), static_cast<uint32_t>(shape.size()), out.data_ptr(),
                            out.nbytes());
    }
    return err;
  } catch (const c10::Error& e) {
    return FromException(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return FromException(e.what());
  }
}

}  // namespace

extern "C" {

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  uint32_t major = 0, minor = 0;
  TRITONSERVER_Error* err = bk_check_api("pytorch", &major, &minor);
  if (err) return err;
  bk_log(TRITONSERVER_LOG_INFO, "libtorch %s, %zu CUDA devices, %d threads, backend API %u.%u, CPU execution", TORCH_VERSION,
         static_cast<size_t>(torch::cuda::device_count()), at::get_num_threads(), major, minor);
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  json* config = nullptr;
  char* path = nullptr;
  auto* s = new ModelState();
  const char* name = "?";
  TRITONBACKEND_ModelName(model, &name);
  s->name = name;
  TRITONSERVER_Error* err = bk_read_config(model, &config);
  if (!err) err = bk_model_file(model, config, "model.pt", &path);
  if (!err) err = ReadTensors(config, "input", &s->inputs);
  if (!err) err = ReadTensors(config, "output", &s->outputs);
  if (!err) {
    try {
      s->module = torch::jit::load(path, torch::kCPU);
      s->module.eval();
    } catch (const c10::Error& e) {
      err = FromException(e.what_without_backtrace());
    } catch (const std::exception& e) {
      err = FromException(e.what());
    }
  }
  if (!err) err = TRITONBACKEND_ModelSetState(model, s);
  if (!err)
    bk_log(TRITONSERVER_LOG_INFO, "model '%s': TorchScript %s, %zu inputs, %zu outputs, max_batch_size %lld", name, path,
           s->inputs.size(), s->outputs.size(), static_cast<long long>(bk_max_batch_size(config)));
  else
    delete s;
  std::free(path);
  json_free(config);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* s = nullptr;
  TRITONSERVER_Error* err = TRITONBACKEND_ModelState(model, &s);
  if (!err) delete static_cast<ModelState*>(s);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count) {
  return bk_execute(instance, requests, request_count, Respond);
}

}  // extern "C"
