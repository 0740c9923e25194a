"""An OTLP/HTTP trace receiver for the end-to-end tests: each export is decoded with the official
OTLP definitions (the `opentelemetry-proto` package: `ExportTraceServiceRequest`, strictly, so a
field the definitions lack fails the request) and printed as one JSON line of its spans.

OTLP/JSON writes trace and span ids in hex where protobuf's JSON mapping has base64 (the OTLP
specification's one deviation), so they are turned into base64 before parsing, as a collector
does, and the parsed bytes (which must be 16 and 8 long) printed in hex again.

Usage: otlp_receiver.py [--status CODE] [--delay-ms MS]; prints `listening <port>` first.
"""
import argparse
import base64
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def hex_ids_to_base64(request):
    for resource in request.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for field in ID_FIELDS:
                    if field in span:
                        span[field] = base64.b64encode(bytes.fromhex(span[field])).decode()


def any_value(value):
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    return getattr(value, kind)


def spans_of(message):
    out = []
    for resource in message.resource_spans:
        service = {a.key: any_value(a.value) for a in resource.resource.attributes}.get("service.name")
        for scope in resource.scope_spans:
            for span in scope.spans:
                if len(span.trace_id) != 16 or len(span.span_id) != 8:
                    raise ValueError("a trace id is 16 bytes and a span id 8")
                out.append({
                    "service": service,
                    "scope": scope.scope.name,
                    "traceId": span.trace_id.hex(),
                    "spanId": span.span_id.hex(),
                    "parentSpanId": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": span.kind,
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "attributes": {a.key: any_value(a.value) for a in span.attributes},
                    "status": {"code": span.status.code, "message": span.status.message},
                    "events": [e.name for e in span.events],
                })
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--status", type=int, default=200)
    parser.add_argument("--delay-ms", type=int, default=0)
    args = parser.parse_args()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if args.delay_ms:
                time.sleep(args.delay_ms / 1000)
            try:
                request = json.loads(body)
                hex_ids_to_base64(request)
                message = json_format.ParseDict(request, ExportTraceServiceRequest())
                line = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "spans": spans_of(message)}
            except Exception as e:  # the test sees what was wrong with the export
                line = {"path": self.path, "error": f"{type(e).__name__}: {e}"}
            print(json.dumps(line), flush=True)
            self.send_response(args.status)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
