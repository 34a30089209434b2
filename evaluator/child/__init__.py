"""Everything that runs in a child process, beside candidate code: the entry point, loading, trials, the timing
loops, the guard and dispatcher snapshot, the kernel watch, the leak loop, the build tools' installs, the comparer
in the reference child, and the fork server that children are forked from. Nothing here decides a verdict."""
