"""Install the few files of ONNX Runtime Web that the book's live panels load, without node.

Downloads the npm package ``onnxruntime-web`` (a tarball) with urllib, checks it against the
registry's sha512 integrity, and extracts into ``.venv/onnxruntime-web/``:

* ``ort.wasm.bundle.min.js``: the ES module (``ort.wasm.bundle.min.mjs`` in the package) with the
  WebAssembly glue inside. Renamed ``.js``: every server sends ``.js`` as JavaScript, while
  ``.mjs`` depends on the server's MIME table (Python 3.11's http.server reads /etc/mime.types).
  The page loads it with a dynamic ``import()``; its source-map comment is dropped (the map is
  not shipped);
* ``ort-wasm-simd-threaded.wasm``: the runtime itself (the panel fetches it with a progress bar
  and hands the bytes to ``ort.env.wasm.wasmBinary``);
* ``LICENSE`` (the package ships none; its package.json says MIT, Microsoft) and ``VERSION``.

Usage: python scripts/install_onnxruntime_web.py [target folder]   (skips when already there)
"""

import base64
import hashlib
import io
import json
import sys
import tarfile
import urllib.request
from pathlib import Path

VERSION = "1.30.0"
URL = f"https://registry.npmjs.org/onnxruntime-web/-/onnxruntime-web-{VERSION}.tgz"
INTEGRITY = "sha512-q0y+JrrtukXSzsBWEMccVfqX25LRmosXHF+CaRJmg8pZClzcV7svNc4rKY3jL02Vb7QmRMDs1SigqR4CXAfKYQ=="
# file in the package -> file we install
FILES = {
    "package/dist/ort.wasm.bundle.min.mjs": "ort.wasm.bundle.min.js",
    "package/dist/ort-wasm-simd-threaded.wasm": "ort-wasm-simd-threaded.wasm",
    "package/package.json": None,  # read for the license, not installed
}
LICENSE = """onnxruntime-web {version} (https://github.com/microsoft/onnxruntime), license: {license}

MIT License

Copyright (c) Microsoft Corporation. All rights reserved.

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""
DEFAULT_TARGET = Path(__file__).resolve().parents[1] / ".venv" / "onnxruntime-web"


def installed(target: Path) -> bool:
    version = target / "VERSION"
    names = [name for name in FILES.values() if name] + ["LICENSE"]
    return (version.is_file() and version.read_text().strip() == VERSION
            and all((target / name).is_file() and (target / name).stat().st_size for name in names))


def check_integrity(data: bytes) -> None:
    algorithm, _, expected = INTEGRITY.partition("-")
    got = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if got != expected:
        raise SystemExit(f"onnxruntime-web {VERSION}: the download's {algorithm} is {got}, expected {expected}")


def install(target: Path = DEFAULT_TARGET, tarball: Path | None = None) -> Path:
    if installed(target):
        return target
    if tarball is not None:
        data = Path(tarball).read_bytes()
    else:
        with urllib.request.urlopen(URL, timeout=120) as response:
            data = response.read()
    check_integrity(data)
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member, name in FILES.items():
            content = tar.extractfile(member).read()
            if name is None:
                package = json.loads(content)
                (target / "LICENSE").write_text(LICENSE.format(version=package["version"], license=package["license"]))
                continue
            if name.endswith(".js"):
                text = content.decode("utf-8")
                lines = [line for line in text.splitlines() if not line.startswith("//# sourceMappingURL=")]
                content = ("\n".join(lines) + "\n").encode("utf-8")
            (target / name).write_bytes(content)
    (target / "VERSION").write_text(VERSION + "\n")
    return target


if __name__ == "__main__":
    folder = install(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_TARGET,
                     Path(sys.argv[2]) if len(sys.argv) > 2 else None)
    print(f"onnxruntime-web {VERSION} in {folder}")
