"""Jupyter server for the browser tests: Galata's settings, our port, root allowed."""

import os
from pathlib import Path
from tempfile import mkdtemp

from jupyterlab.galata import configure_jupyter_server

c = get_config()  # type: ignore[name-defined] # noqa: F821
configure_jupyter_server(c)
c.ServerApp.port = int(os.environ.get("UI_TEST_PORT", "18888"))
c.ServerApp.ip = "127.0.0.1"
# CI and these machines run as root.
c.ServerApp.allow_root = True
root = os.environ.get("JUPYTERLAB_GALATA_ROOT_DIR") or mkdtemp(prefix="ipy-resume-ui-")
Path(root).mkdir(parents=True, exist_ok=True)
c.ServerApp.root_dir = root
# Each notebook's kernel keeps its store next to the notebook, as for a user.
os.environ.pop("IPY_RESUME_DIR", None)
