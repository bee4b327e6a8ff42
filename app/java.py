"""Spark needs Java 17 or newer: say clearly what to install when it is missing or too old."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

MIN_JAVA = 17
HINT = "install Java 17 or newer, e.g. `apt-get install openjdk-17-jre-headless` (Debian/Ubuntu), and/or set JAVA_HOME"


class JavaMissing(RuntimeError):
    pass


def check_java() -> int:
    """Return the Java major version.

    Raises:
        JavaMissing: no java on PATH / JAVA_HOME, or older than 17.
    """
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise JavaMissing(f"Java was not found; {HINT}")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise JavaMissing(f"could not read the Java version from `{java} -version`; {HINT}")
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise JavaMissing(f"Java {major} is too old for Spark 4; {HINT}")
    return major
