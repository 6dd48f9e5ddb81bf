"""Runs the README's first example as its reader would, after the README's install line alone: in
a bare venv with none of ci/env.sh's variables (ci/bare-venv-sycl).
    python run_readme_example.py path/to/README.md"""

import pathlib
import re
import sys

text = pathlib.Path(sys.argv[1]).read_text()
example = re.search(r"<!-- example[^>]*-->\n```python\n(.*?)```", text, re.S)
assert example, "the README has no example"
exec(compile(example.group(1), "README.md's example", "exec"), {"__name__": "__main__"})
print("the README's example ran")
