"""Root pytest configuration: shared by tests/ and by nbval over book/.

Points tiktoken (and the data loaders) at the offline copies in ../shared/data when they are
there and nothing else was set, before any notebook kernel starts (kernels inherit the environment).
"""

import os
from pathlib import Path

_data = Path(__file__).resolve().parent.parent / "shared" / "data"
if _data.is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(_data / "tiktoken-cache"))
    os.environ.setdefault("TFS_DATA_DIR", str(_data))
