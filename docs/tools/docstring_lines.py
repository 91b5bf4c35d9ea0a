"""Total module-docstring lines under a source tree: sum over *.py of the module docstring's line count."""
import ast, sys
from pathlib import Path
root = Path(sys.argv[1] if len(sys.argv) > 1 else "src/workhorse")
total, rows = 0, []
for path in sorted(root.rglob("*.py")):
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    n = len(doc.splitlines()) if doc else 0
    total += n
    rows.append((n, str(path.relative_to(root))))
over5 = [r for r in rows if r[0] > 5]
print(f"modules={len(rows)} docstring_lines={total} modules_over_5_lines={len(over5)}")
for n, p in sorted(rows, reverse=True)[:10]:
    print(f"  {n:4d} {p}")
