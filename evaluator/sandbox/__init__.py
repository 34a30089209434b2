"""Starting and containing child processes: the spawn of a jailed child, the jail itself, the seccomp filter,
cgroups, the parent's budgets read from outside a child, its device memory, and kforge's end of the fork server."""
