// Package sandbox runs a command in a bubblewrap (bwrap) sandbox assembled from
// paths: a CPython prefix mounted read-only at /opt/python, pylayer layer roots
// mounted read-only under /opt/pylayer/layers/, and a workspace mounted
// read-write at /workspace.
//
// Argv builds the bwrap command line as plain data (testable without root); Run
// executes it with a timeout, a process group killed whole, capped output and an
// empty environment for bwrap itself, after checking that the Spec's host paths
// exist; Check and FindBwrap serve `pylayer doctor`.
//
// # What the sandbox sees
//
//   - /usr read-only; /bin, /lib, /lib64, /lib32, /libx32 and /sbin as the
//     host has them (a symlink such as bin -> usr/bin on merged-usr systems is
//     recreated as a symlink, a real directory is bound read-only).
//   - From /etc only: ld.so.cache, localtime, alternatives, ssl/certs and fonts
//     (read-only, each only if present), plus a generated two-line passwd and
//     group naming the sandbox user. The host's
//     /etc is never bound as a whole: it holds host names, credentials and
//     configuration that a sandboxed program has no business reading.
//     /etc/matplotlibrc is never bound: a matplotlib wheel ships its own.
//   - Fonts as fontconfig, Pillow and matplotlib look for them: /etc/fonts (the
//     configuration; without it "Fontconfig error: Cannot load default config
//     file"), the fonts under /usr/share/fonts (part of /usr) and the host's
//     font cache /var/cache/fontconfig, read-only when present, the only
//     directory of the host's /var the sandbox sees.
//   - A fresh /proc and /dev, tmpfs /tmp and /home (HOME=/home/sandbox), and
//     nothing of the host's /home, /root, /var (but its font cache) or /run. The
//     root is read-only.
//   - Caches: XDG_CACHE_HOME=/home/sandbox/.cache, MPLCONFIGDIR in it. It is in
//     the tmpfs home, rebuilt by every run, unless Spec.Cache names a host
//     directory to bind read-write there: one per session (`pylayer run
//     --session` keeps one under the host cache), so matplotlib's font list
//     (~200 ms) is built once per session and no session reads what another
//     wrote. Run hands it to the sandbox user under the workspace's rules.
//     MPLBACKEND=Agg (the sandbox has no display), unless Spec.Env says otherwise.
//   - PATH: /opt/python/bin, /opt/pylayer/bin (the pip shim, ahead of any pip a
//     layer ships), each mounted layer's bin/ in PYTHONPATH order (ext layers,
//     then the iso layer or the base), then /usr/local/bin:/usr/bin:/bin. Console
//     scripts that layers/wheel writes start with #!/opt/python/bin/python3, the
//     interpreter, or in degraded mode its symlink to /usr/bin/python3.
//   - All namespaces unshared (--unshare-all plus an explicit user namespace):
//     no network, its own pids, uid and gid 1000 ("sandbox"), no capabilities,
//     hostname "sandbox". --die-with-parent and --new-session.
//
// # Hardening
//
// A session is never host root and holds no capability on the host:
//
//   - Started by root, bwrap itself runs as an unprivileged host user
//     (HostIdentity: DefaultSandboxUser, created on first use, or one named by
//     configuration), so the sandbox's uid 1000 is that user on the host, never
//     uid 0. Files a session writes are that user's; the workspace directory is
//     handed to it. Every directory bwrap binds must be reachable by that user
//     (Run checks and says what to change; root's default cache is
//     /var/cache/pylayer). Started by anyone else, sessions run as the caller.
//   - --disable-userns: no user namespace can be made inside. /proc/sys is
//     read-only (bwrap covers /proc/sysrq-trigger, /proc/irq and /proc/bus); the
//     host's /sys is not mounted; bwrap's own /dev is remounted read-only, with a
//     sized tmpfs /dev/shm.
//   - A seccomp filter (package sandbox/seccomp, passed as --seccomp) that blocks
//     at least what Flatpak's blocks, and creating setuid or setgid files.
//   - Limits (Limits, with defaults): processes, memory, CPU time, open files,
//     file size, core dumps off, sized tmpfs mounts; see Limits for how each is
//     enforced without a delegated cgroup.
//   - The workspace is resolved without following any symlink and must be a
//     directory the caller owns (see checkWorkspace for what remains).
//   - The caller's terminal never reaches the sandbox: a terminal given as
//     stdin is replaced by /dev/null (sessions are not interactive); TerminalSafe
//     neutralises control sequences of output shown on a terminal.
//   - The environment is cleared; then PATH (made of the sandbox's own
//     directories, never inherited), PYTHONPATH, PIP_NO_INDEX=1,
//     PYTHONDONTWRITEBYTECODE=1, PYTHONNOUSERSITE=1, HOME, USER, LOGNAME,
//     LANG=C.UTF-8, XDG_CACHE_HOME, MPLCONFIGDIR, MPLBACKEND=Agg and the
//     variables the caller names in Spec.Env (never one whose name looks like a
//     secret).
//
// # Layers
//
// Layer i of Spec.Layers is mounted at /opt/pylayer/layers/<i>-<kind>.
// PYTHONPATH lists the guard directory first, then the ext layers'
// site-packages in Spec order, then the base's; an iso layer takes the place of
// the base, which is then not mounted at all. A sitecustomize.py in the guard
// directory then moves the layer entries (same order) from before the standard
// library to just before the interpreter's own site directories, where pip would
// have put the packages, so a wheel's top-level enum.py or typing.py cannot shadow
// the stdlib, and processes the layers' .pth files as site.addsitedir does
// (namespace-package .pth files of zope.*, backports.* ... need this). It then
// runs the interpreter's own sitecustomize, if any. The layers' bin/
// directories are on PATH in the same order, so console scripts (markdown_py,
// f2py, fonttools ...) run by name.
//
// # pip
//
// /opt/pylayer/bin/pip, pip3 and pip3.9 to pip3.14 are a shim that explains how to ask for
// packages and exits 1; /opt/pylayer/guard/pip/__init__.py, first on PYTHONPATH,
// makes `python3 -m pip` and `import pip` fail with the same explanation. With
// Spec.Support (the CLI's run gives the host cache's sandbox directory) these
// files, /etc/passwd and /etc/group are one tree written there once per content
// and bound read-only at /opt/pylayer/support, which /opt/pylayer/bin,
// /opt/pylayer/guard, /etc/passwd and /etc/group link to: one mount instead of
// five. Beside the tree, each interpreter gets the guard's sitecustomize compiled
// once, in a session of its own, and bound at the tree's guard/__pycache__: importing
// the guard from source cost every interpreter start about 1 ms (guardpyc.go).
// Without Spec.Support they reach bwrap as --ro-bind-data from inherited descriptors
// (see DataFiles), and nothing is written on the host.
//
// # Degraded mode
//
// With Spec.Interpreter == "" the host's /usr/bin/python3 is used: /opt/python
// then holds only bin/python3 and bin/python, symlinks to /usr/bin/python3, so
// that layer console scripts (#!/opt/python/bin/python3) still run. The host
// interpreter's own dist-packages stay on sys.path after PYTHONPATH.
//
// Package sandbox only needs paths: it must never import registry, oci, broker,
// catalog or the CLI. It never prints and never logs.
package sandbox
