"""`make ui` (`python -m data_assets.ui`): Dagster's webserver and daemon on the project's instance.

What `dagster dev` starts, with the daemon of data_assets/daemon.py (Dagster's daemon, a 2 s backfill
iteration): `dagster-webserver -w workspace.yaml` on SLUICE_UI_HOST:SLUICE_UI_PORT (127.0.0.1:3000) and
`python -m data_assets.daemon run -w workspace.yaml`, both on $DAGSTER_HOME (default .dagster_home/).
Ctrl-C (or SIGTERM) stops both; so does either one exiting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    from data_assets.instance import ensure_dagster_home

    home = ensure_dagster_home()
    host, port = os.environ.get("SLUICE_UI_HOST", "127.0.0.1"), os.environ.get("SLUICE_UI_PORT", "3000")
    workspace = str(PROJECT_ROOT / "workspace.yaml")
    webserver = str(Path(sys.executable).parent / "dagster-webserver")
    processes = [
        subprocess.Popen([sys.executable, "-m", "data_assets.daemon", "run", "-w", workspace], cwd=PROJECT_ROOT, start_new_session=True),
        subprocess.Popen([webserver, "-h", host, "-p", port, "-w", workspace], cwd=PROJECT_ROOT, start_new_session=True),
    ]
    print(f"Dagster UI on http://{host}:{port} (instance {home}); daemon running. Ctrl-C stops both.", flush=True)
    stopping: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stopping.append(signum))
    while not stopping and all(process.poll() is None for process in processes):
        time.sleep(0.5)
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    return 128 + stopping[0] if stopping else max(process.returncode or 0 for process in processes)


if __name__ == "__main__":
    sys.exit(main())
