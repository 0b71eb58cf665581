"""Vendor etcd's v3 API definitions into proto/etcd (run by hand when moving to another etcd release).

    python proto/etcd/vendor.py /path/to/etcd-checkout v3.4.23

Takes etcdserverpb/rpc.proto, mvccpb/kv.proto and authpb/auth.proto from the tag and strips what only
Go code generation and the HTTP gateway use: the gogoproto import with its options, and the
google/api/annotations.proto import with every google.api.http annotation. The wire format does not
depend on either. Imports are rewritten to the vendored paths (etcd/mvccpb, etcd/authpb).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = {
    "etcdserver/etcdserverpb/rpc.proto": "etcdserverpb/rpc.proto",
    "mvcc/mvccpb/kv.proto": "mvccpb/kv.proto",
    "auth/authpb/auth.proto": "authpb/auth.proto",
}
HEADER = """\
// Vendored from etcd {tag} (https://github.com/etcd-io/etcd, commit {commit}), {path}.
// Copyright The etcd Authors. Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0); the upstream file carries no header of its own.
// Stripped by proto/etcd/vendor.py, none of it part of the wire format: the gogoproto import and its
// options (Go code generation only) and, in rpc.proto, the google/api/annotations.proto import and
// every google.api.http annotation (the grpc-gateway's HTTP mapping). Imports of kv.proto and
// auth.proto name their vendored paths.

"""


def strip(source: str) -> str:
    source = _drop_http_annotations(source)
    source = re.sub(r'^import "gogoproto/gogo.proto";\n', "", source, flags=re.M)
    source = re.sub(r'^// for grpc-gateway\nimport "google/api/annotations.proto";\n', "", source, flags=re.M)
    source = re.sub(r"^option \(gogoproto\.\w+\) = (true|false);\n", "", source, flags=re.M)
    source = re.sub(r"\s*\[\(gogoproto\.[^\]]*\]", "", source)
    source = source.replace('"etcd/mvcc/mvccpb/kv.proto"', '"etcd/mvccpb/kv.proto"')
    source = source.replace('"etcd/auth/authpb/auth.proto"', '"etcd/authpb/auth.proto"')
    if "gogoproto" in source or "google.api" in source:
        raise SystemExit("vendor.py: an annotation was not stripped; extend strip()")
    return source


def _drop_http_annotations(source: str) -> str:
    """`rpc X(A) returns (B) { option (google.api.http) = {...}; }` -> `rpc X(A) returns (B);`."""
    out = []
    pos = 0
    for match in re.finditer(r"\)\s*\{\s*option \(google\.api\.http\) = \{", source):
        if match.start() < pos:
            continue
        depth, i = 1, match.end()
        while depth:  # the annotation may nest additional_bindings { ... }
            depth += {"{": 1, "}": -1}.get(source[i], 0)
            i += 1
        end = source.index("}", source.index(";", i)) + 1  # the rpc's own closing brace
        out.append(source[pos:match.start()] + ");")
        pos = end
    out.append(source[pos:])
    return "".join(out)


def main(checkout: Path, tag: str) -> None:
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", f"{tag}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    for upstream, vendored in FILES.items():
        source = subprocess.run(["git", "-C", str(checkout), "show", f"{tag}:{upstream}"],
                                check=True, capture_output=True, text=True).stdout
        target = HERE / vendored
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(HEADER.format(tag=tag, commit=commit, path=upstream) + strip(source))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
