import sys, os, contextlib
sys.argv = sys.argv[:3] + []
exec(open("/work/main/.probe/bias.py").read().replace("class Rec(Pacer):", '''class Rec(Pacer):
    hold = property(lambda self: contextlib.nullcontext, lambda self, v: None) if os.environ.get("NOHOLD") else Pacer.hold if hasattr(Pacer, "hold") else None
''').replace("import multiprocessing,", "import contextlib, multiprocessing,"))
