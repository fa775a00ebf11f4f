"""Triton's gRPC protocol, through NVIDIA's tritonclient: streams for decoupled models, and
requests carrying a sequence's correlation ID and flags.

The HTTP client (composer.verify.triton_client) serves every other model; this one is opened only
when a model needs it (the channel is made on the first request), so a smoke test of plain
models neither imports tritonclient nor opens a channel. Like the HTTP client it reaches the
server directly, never through a proxy from the environment. Every request has a deadline.
"""

from __future__ import annotations

import itertools
import queue
from typing import Any, Sequence

from composer.core.errors import ComposerError
from composer.config.cases import TensorData
from composer.verify.protocols import RESPONSE_TIMEOUT, Event, SequenceFlags, StreamAnswer, read_stream
from composer.verify.triton_client import InferenceError, _one_line

MAX_MESSAGE = 2**31 - 1  # tritonclient's own default message limits, kept where the channel options are given
FINAL = "triton_final_response"  # the response parameter that carries the final flag


class TritonGRPC:
    """A Triton server's gRPC endpoint at `url` (127.0.0.1:PORT, or http://127.0.0.1:PORT as
    composer.engine.interface.Container.url gives it)."""

    def __init__(self, url: str):
        self.address = url.split("://", 1)[-1].rstrip("/")
        self._client = None
        self._ids = itertools.count(1)

    @property
    def opened(self) -> bool:
        return self._client is not None

    def _open(self):
        if self._client is None:
            try:  # here: only a smoke test that needs it pays for it
                import tritonclient.grpc as grpcclient
            except ImportError as error:
                raise ComposerError(f"streaming and sequence models are smoke-tested over gRPC, and NVIDIA's "
                                    f"tritonclient cannot be imported ({error}): pip install 'tritonclient[grpc]'"
                                    ) from None
            self._client = grpcclient.InferenceServerClient(self.address, channel_args=[
                ("grpc.max_send_message_length", MAX_MESSAGE),
                ("grpc.max_receive_message_length", MAX_MESSAGE),
                ("grpc.enable_http_proxy", 0),  # a local server: never through http_proxy
            ])
        return self._client

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None

    def infer(self, model: str, inputs: Sequence[TensorData], sequence: SequenceFlags | None = None,
              timeout: float = RESPONSE_TIMEOUT) -> dict[str, TensorData]:
        """One inference (ModelInfer), with the sequence's correlation ID and flags when given."""
        client = self._open()
        from tritonclient.utils import InferenceServerException

        try:
            result = client.infer(model, [infer_input(t) for t in inputs], client_timeout=timeout,
                                  **sequence_arguments(sequence))
        except InferenceServerException as error:
            raise InferenceError(f"gRPC ModelInfer {model}: {_one_line(error.message() or error)}") from None
        return outputs_of(result)

    def stream(self, model: str, inputs: Sequence[TensorData], sequence: SequenceFlags | None = None,
               timeout: float = RESPONSE_TIMEOUT) -> StreamAnswer:
        """One request over a stream of its own (ModelStreamInfer): every response up to the final
        flag, or what came before the error or the deadline. The stream is cancelled when done, so
        a model that never sends its final flag holds nothing of the client's."""
        client = self._open()
        from tritonclient.utils import InferenceServerException

        events: queue.Queue = queue.Queue()  # this stream's own: a cancelled stream's last words stay there
        try:
            client.start_stream(callback=lambda result, error: events.put(event_of(result, error)))
        except InferenceServerException as error:
            raise InferenceError(f"gRPC ModelStreamInfer {model}: {_one_line(error.message() or error)}") from None
        try:
            client.async_stream_infer(model, [infer_input(t) for t in inputs], request_id=f"smoke-{next(self._ids)}",
                                      enable_empty_final_response=True, **sequence_arguments(sequence))
            return read_stream(lambda wait: _next_event(events, wait), timeout)
        except InferenceServerException as error:
            raise InferenceError(f"gRPC ModelStreamInfer {model}: {_one_line(error.message() or error)}") from None
        finally:
            client.stop_stream(cancel_requests=True)


def _next_event(events: queue.Queue, wait: float) -> Event | None:
    try:
        return events.get(timeout=max(wait, 0.0))
    except queue.Empty:
        return None


def sequence_arguments(sequence: SequenceFlags | None) -> dict[str, Any]:
    if sequence is None:
        return {}
    return {"sequence_id": sequence.sequence_id, "sequence_start": sequence.start, "sequence_end": sequence.end}


def infer_input(tensor: TensorData):
    """A tritonclient input holding `tensor` (strings of BYTES tensors sent as UTF-8)."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import triton_to_np_dtype

    if tensor.datatype == "BYTES":
        values = [v.encode() if isinstance(v, str) else bytes(v) if isinstance(v, (bytes, bytearray)) else str(v).encode()
                  for v in tensor.data]
        array = np.array(values, dtype=np.object_)
    else:
        array = np.array(tensor.data, dtype=triton_to_np_dtype(tensor.datatype))
    made = grpcclient.InferInput(tensor.name, list(tensor.shape), tensor.datatype)
    made.set_data_from_numpy(array.reshape(tensor.shape))
    return made


def event_of(result, error) -> Event:
    """A stream callback's (result, error) as an Event: the outputs and the final flag of a response."""
    if error is not None:
        message = error.message() if hasattr(error, "message") else str(error)
        return Event(error=_one_line(message or type(error).__name__))
    response = result.get_response()
    parameters = response.parameters
    final = parameters[FINAL].bool_param if FINAL in parameters else True  # a model that does not say answers once
    return Event(outputs=outputs_of(result), final=final)


def outputs_of(result) -> dict[str, TensorData]:
    """The outputs of a tritonclient InferResult by name, as the HTTP client gives them: flat data,
    BYTES as strings."""
    response = result.get_response()
    outputs = {}
    for output in response.outputs:
        array = result.as_numpy(output.name)
        data = () if array is None else tuple(_plain(v) for v in array.reshape(-1).tolist())
        outputs[output.name] = TensorData(output.name, output.datatype, tuple(int(d) for d in output.shape), data)
    return outputs


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return value

