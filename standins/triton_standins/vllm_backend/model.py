"""The vllm backend of the vLLM stand-in (triton-composer's own, in the place of NGC's).

A Python-based backend: Triton serves this model.py through the python backend for every model
whose config says `backend: "vllm"`. As NGC's, it reads the engine arguments from the model's
`<version>/model.json`, builds vLLM's AsyncLLMEngine from them and serves text generation,
decoupled (one response per output, then the final flag). On a host with no GPU the engine
cannot be built, and the model fails to load with vLLM's (or CUDA's) own reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        """NGC's vllm model interface: text_input, stream, sampling_parameters -> text_output."""
        inputs = [
            {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
            {"name": "stream", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
            {"name": "sampling_parameters", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
        ]
        outputs = [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}]
        have_in = {i["name"] for i in config.as_dict().get("input", [])}
        have_out = {o["name"] for o in config.as_dict().get("output", [])}
        for item in inputs:
            if item["name"] not in have_in:
                config.add_input(item)
        for item in outputs:
            if item["name"] not in have_out:
                config.add_output(item)
        config.set_max_batch_size(0)
        config.set_model_transaction_policy({"decoupled": True})
        return config

    def initialize(self, args):
        folder = os.path.join(args["model_repository"], args["model_version"])
        path = os.path.join(folder, "model.json")
        try:
            with open(path) as handle:
                engine_args = json.load(handle)
        except (OSError, ValueError) as error:
            raise pb_utils.TritonModelException(f"vllm backend: cannot read {path}: {error}") from None
        model = engine_args.get("model")
        if isinstance(model, str) and not os.path.isabs(model) and os.path.isdir(os.path.join(folder, model)):
            engine_args["model"] = os.path.join(folder, model)  # a model folder beside model.json

        # Imported here: a model that fails to load says why, in vLLM's words.
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.engine.async_llm_engine import AsyncLLMEngine

        self.engine = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**engine_args))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def execute(self, requests):
        for request in requests:
            asyncio.run_coroutine_threadsafe(self._generate(request), self.loop)
        return None

    async def _generate(self, request):
        from vllm import SamplingParams

        sender = request.get_response_sender()
        try:
            prompt = _first(request, "text_input")
            prompt = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
            stream = bool(_first(request, "stream", False))
            params = _first(request, "sampling_parameters", b"{}")
            params = json.loads(params.decode() if isinstance(params, bytes) else params or "{}")
            sent = 0
            async for output in self.engine.generate(prompt, SamplingParams(**params), str(uuid.uuid4())):
                text = output.outputs[0].text
                if stream:
                    sender.send(_response(text[sent:]))
                    sent = len(text)
                elif output.finished:
                    sender.send(_response(prompt + text))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as error:  # the client hears why, the server goes on
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error))),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        loop = getattr(self, "loop", None)
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            self.thread.join(timeout=10)


def _first(request, name, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    return tensor.as_numpy().reshape(-1)[0]


def _response(text):
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))])
