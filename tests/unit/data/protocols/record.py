"""Record real gRPC exchanges with a Triton server for the unit tests of the stream and sequence
readers (composer.verify.protocols, composer.verify.grpc_client).

Serve tests/integration/models/protocols/good and broken together in one repository, then:

    python record.py 127.0.0.1:GRPC_PORT 127.0.0.1:HTTP_PORT > exchanges.json

Each response is stored as the server sent it (a serialized ModelInferResponse, base64), each
error as its message, each with the seconds since the request was sent; each model's
configuration as the server serves it over HTTP (GET /v2/models/M/config, what the smoke test reads).
"""

from __future__ import annotations

import base64
import json
import queue
import sys
import time
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

WAIT = 3.0  # how long a stream with no final flag is listened to


def tensor(name, values, datatype="INT32"):
    made = grpcclient.InferInput(name, [len(values)], datatype)
    made.set_data_from_numpy(np.array(values, dtype=np.int32))
    return made


def response(result, started):
    return {"after": round(time.monotonic() - started, 3),
            "response": base64.b64encode(result.get_response().SerializeToString()).decode()}


def stream(client, model, inputs, **sequence):
    events: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    started = time.monotonic()
    client.async_stream_infer(model, inputs, request_id="r1", enable_empty_final_response=True, **sequence)
    recorded = []
    while True:
        try:
            result, error = events.get(timeout=WAIT)
        except queue.Empty:
            recorded.append({"after": round(time.monotonic() - started, 3), "silence": WAIT})
            break
        if error is not None:
            recorded.append({"after": round(time.monotonic() - started, 3), "error": error.message()})
            break
        recorded.append(response(result, started))
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    client.stop_stream(cancel_requests=True)
    return recorded


def infer(client, model, inputs, **sequence):
    started = time.monotonic()
    try:
        return response(client.infer(model, inputs, **sequence), started)
    except InferenceServerException as error:
        return {"after": round(time.monotonic() - started, 3), "error": error.message()}


def flags(sequence_id, start, end):
    return {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}


def configs(http):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the local server, directly
    with opener.open(f"http://{http}/v2/repository/index", data=b"{}") as answer:
        names = sorted(m["name"] for m in json.load(answer))
    found = {}
    for name in names:
        with opener.open(f"http://{http}/v2/models/{name}/config") as answer:
            found[name] = json.load(answer)
    return found


def main(url, http):
    client = grpcclient.InferenceServerClient(url)
    streams = {
        "counter 3": stream(client, "counter", [tensor("COUNT", [3])]),
        "counter_ensemble 2": stream(client, "counter_ensemble", [tensor("COUNT", [2])]),
        "endless": stream(client, "endless", [tensor("COUNT", [1])]),
        "empty_stream": stream(client, "empty_stream", [tensor("COUNT", [1])]),
        "wrong_type_stream": stream(client, "wrong_type_stream", [tensor("COUNT", [1])]),
        "counter bad input": stream(client, "counter", [tensor("NOPE", [1])]),
        "streamed_sum 3": stream(client, "streamed_sum", [tensor("X", [3])], **flags(21, True, False)),
        "streamed_sum 4": stream(client, "streamed_sum", [tensor("X", [4])], **flags(21, False, True)),
    }
    sequences = {
        "running_sum": [{"flags": flags(9, True, False), **infer(client, "running_sum", [tensor("X", [3])], **flags(9, True, False))},
                        {"flags": flags(9, False, True), **infer(client, "running_sum", [tensor("X", [4])], **flags(9, False, True))}],
        "running_sum unrelated": [{"flags": flags(10, True, True), **infer(client, "running_sum", [tensor("X", [3])], **flags(10, True, True))},
                                  {"flags": flags(11, False, True), **infer(client, "running_sum", [tensor("X", [4])], **flags(11, False, True))}],
        "running_sum no id": [{"flags": None, **infer(client, "running_sum", [tensor("X", [3])])}],
        "sum_ensemble": [{"flags": flags(12, True, False), **infer(client, "sum_ensemble", [tensor("X", [3])], **flags(12, True, False))},
                         {"flags": flags(12, False, True), **infer(client, "sum_ensemble", [tensor("X", [4])], **flags(12, False, True))}],
        "string_corrid string id": [{"flags": flags("s-1", True, True), **infer(client, "string_corrid", [tensor("X", [3])], **flags("s-1", True, True))}],
        "string_corrid number id": [{"flags": flags(13, True, True), **infer(client, "string_corrid", [tensor("X", [3])], **flags(13, True, True))}],
        "counter unary": [{"flags": None, **infer(client, "counter", [tensor("COUNT", [3])])}],
    }
    server = client.get_server_metadata().version
    client.close()
    json.dump({"server": server, "configs": configs(http), "streams": streams, "sequences": sequences}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
