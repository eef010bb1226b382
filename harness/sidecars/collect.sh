# Patch extraction, run by `sh -c` inside a fresh `--network none` trial container.
#
# Mounts: /base (read-only, the pristine base checkout), /workspace (read-only,
# what the agent left), /out and /verify (fresh, controller-owned, writable).
# Arguments: the task's protected paths. A volume workspace (a remote engine) has no /out of its own:
# COLLECT_OUT names the outputs' directory inside its scratch volume, COLLECT_BASEGIT the base's
# repository inside /base, and COLLECT_UPPER the overlay's upper directory (see the incremental mode).
#
# git runs with a fresh GIT_DIR in /tmp and no config, hooks, fsmonitor or
# attribute drivers: the agent's own .git (and any nested repository, planted
# config or .gitattributes driver) is never consulted. Outputs go to /out:
#   patch.diff   binary diff base -> workspace, untracked files included (capped)
#   numstat      git diff --numstat -z        raw   git diff --raw -z (modes)
#   special      FIFOs, sockets, devices, setuid/setgid files in the workspace (found first)
#   nested       nested repositories (.git below the top), left out of the diff
#   links        when extraction stops: the symlinks the agent made or changed, path NUL target NUL
#                (found by lstat, as the special files: the record names them although no diff does)
#   status       "ok" or the reason extraction stopped
# and /verify becomes base + patch with protected paths restored from base.
set -u
umask 022
CAP="${COLLECT_PATCH_CAP:-8388608}"
OUT="${COLLECT_OUT:-/out}"
BASEGIT="${COLLECT_BASEGIT:-/basegit}"
export HOME=/tmp/h XDG_CONFIG_HOME=/tmp/h GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null \
  GIT_DIR=/tmp/x.git GIT_TERMINAL_PROMPT=0 GIT_NO_LAZY_FETCH=1 GIT_NO_REPLACE_OBJECTS=1 \
  GIT_ATTR_NOSYSTEM=1 GIT_OPTIONAL_LOCKS=0 LC_ALL=C
mkdir -p /tmp/h
# no option holds a space: $GIT_OPTS is split into words on purpose (xargs' shells below use it too)
GIT_OPTS="-c core.fsmonitor=false -c core.hooksPath=/dev/null -c core.attributesFile=/dev/null \
-c core.excludesFile=/dev/null -c core.autocrlf=false -c core.safecrlf=false -c core.symlinks=true \
-c core.quotePath=true -c diff.ignoreSubmodules=all -c gc.auto=0 -c user.name=harness \
-c user.email=harness@localhost -c commit.gpgSign=false -c core.bigFileThreshold=1m"
export GIT_OPTS
# shellcheck disable=SC2086
G() { git $GIT_OPTS "$@"; }
# Every output is capped, so all of them together fit the archive a volume workspace's controller copies
# out (status comes last there): git's messages are kept in /tmp/err and copied to $OUT capped, on every exit.
ERRCAP=65536
mkdir -p /tmp/err
keep_errors() { for f in /tmp/err/*.err; do [ -f "$f" ] && tail -c "$ERRCAP" "$f" > "$OUT/${f##*/}"; done; }
# The symlinks the agent made or changed (path NUL target NUL), listed without git: what the agent wrote
# (incremental mode), or every link of the workspace outside a .git that is not the base's same link.
list_links() {
  if [ -n "${INC:-}" ]; then
    sed -z 's|^|/workspace/|' "$INC/changed" |
      xargs -0 -r sh -c 'find "$@" -maxdepth 0 -type l -printf "%p\0%l\0"' sh
  else
    find /workspace -name .git -prune -o -type l ! -exec sh -c \
      'b="/base/${1#/workspace/}"; [ -L "$b" ] && [ "$(readlink -- "$1"; echo x)" = "$(readlink -- "$b"; echo x)" ]' \
      sh {} \; -printf '%p\0%l\0'
  fi 2>/dev/null | head -c 65536 > "$OUT/links"
}
fail() { list_links; keep_errors; printf '%s\n' "$1" > "$OUT/status"; exit "${2:-3}"; }

# Incremental mode (COLLECT_CHANGES set: an overlay workspace): the controller listed what the agent
# wrote from the overlay's upper directory (/changes: changed, gone, special, nested, NUL-separated),
# $BASEGIT is the template's repository (its index and objects are the base, added under the options
# below), and /verify is already base (an overlay of it). Only
# what changed is read, so the cost follows the change, not the repository; the patch is byte for
# byte the one the full mode makes (tests/integration/test_workspaces.py).
INC="${COLLECT_CHANGES:-}"
# A volume workspace (an engine on another machine: the controller cannot walk its upper directory)
# lists the upper directory here, the way harness/trial/workspace.py:changes does, with two
# differences that only widen the lists: every directory the agent wrote is a deletion candidate (an
# opaque directory's xattr is in the trusted namespace, which this unprivileged container cannot
# read; `ls-files --deleted` then finds exactly the base entries that are really gone), and every
# character device is a whiteout (the agent holds no CAP_MKNOD: the kernel's whiteouts are the only
# ones there). One record per entry, a type letter before its path, sorted, then split by type.
if [ -n "${COLLECT_UPPER:-}" ]; then
  INC=/tmp/changes
  mkdir -p "$INC"
  (cd "$COLLECT_UPPER" && find . -mindepth 1 \
      \( -name .git ! -path ./.git -prune -printf 'n%P\0' \) -o \
      \( -path ./.git -o -path './.git/*' \) -o \
      \( \( -type c -o -type d \) -printf 'g%P\0' \) -o \
      \( \( -type p -o -type s -o -type b -o \( -type f \( -perm -4000 -o -perm -2000 \) \) \) \
         -printf 's%P\0' -printf 'c%P\0' \) -o \
      -printf 'c%P\0') > /tmp/upper.list || fail "listing what the agent wrote failed (unreadable?)"
  sort -z /tmp/upper.list > /tmp/upper.sorted || fail "sorting what the agent wrote failed"
  sed -nz 's/^c//p' /tmp/upper.sorted > "$INC/changed"
  sed -nz 's/^g//p' /tmp/upper.sorted > "$INC/gone"
  sed -nz 's|^s|/workspace/|p' /tmp/upper.sorted | head -c 65536 > "$INC/special"
  sed -nz 's|^n|/workspace/|p' /tmp/upper.sorted | head -c 65536 > "$INC/nested"
fi
# Special files are found before git touches the tree: find only lstat()s, never opens them.
if [ -n "$INC" ]; then
  head -c 65536 "$INC/special" > "$OUT/special"
else
  find /workspace -path /workspace/.git -prune -o \
    \( -type p -o -type s -o -type b -o -type c -o -perm -4000 -o -perm -2000 \) -print0 \
    2>/dev/null | head -c 65536 > "$OUT/special"
fi
# git opens the per-directory files it reads (.gitignore, .gitattributes, .gitmodules) by name, and
# opening a FIFO blocks for ever: a special file with such a name stops extraction before git runs.
if tr '\0' '\n' < "$OUT/special" | grep -q '/\.git[^/]*$'; then
  fail "special file named .git* in the workspace (not opened; git would block on it)" 0
fi
G init -q --bare "$GIT_DIR" || fail "git init failed"
# Nested repositories (a .git below the top) are left out of the diff (one without a commit
# would make `git add` fail); the host rejects a patch from a workspace that has any.
if [ -n "$INC" ]; then
  head -c 65536 "$INC/nested" > "$OUT/nested"
else
  find /workspace -mindepth 2 -name .git -prune -print0 2>/dev/null | head -c 65536 > "$OUT/nested"
fi
mkdir -p "$GIT_DIR/info"
tr '\0' '\n' < "$OUT/nested" | sed -e 's|^/workspace||' -e 's|/\.git$|/|' -e 's/[][*?\\!#]/\\&/g' \
  > "$GIT_DIR/info/exclude"
if [ -n "$INC" ]; then
  # the base as the full mode would have added it (made once per run under the same options), then
  # what `git add -A` would change: tracked paths the agent wrote or deleted, and untracked ones it
  # wrote that no .gitignore excludes
  cp "$BASEGIT/index" "$GIT_DIR/index" || fail "copying the base index failed"
  printf '%s/objects\n' "$BASEGIT" > "$GIT_DIR/objects/info/alternates"
  G update-ref HEAD "$(git --git-dir="$BASEGIT" rev-parse --verify HEAD^{commit})" || fail "reading the base commit failed"
  (
    cd /workspace || exit 3
    export GIT_LITERAL_PATHSPECS=1
    LS='git $GIT_OPTS --work-tree=/workspace ls-files -z "$@"'
    { xargs -0 -r sh -c "$LS" ls --deleted -- < "$INC/gone" &&
      xargs -0 -r sh -c "$LS" ls -- < "$INC/changed" &&
      xargs -0 -r sh -c "$LS" ls --others --exclude-standard -- < "$INC/changed"
    } > /tmp/paths || exit 3
    G --work-tree=/workspace update-index --add --remove --replace -z --stdin < /tmp/paths
  ) 2>/tmp/err/add.err || fail "adding the workspace failed (too large or unreadable?)"
else
  # --force: every file of the checkout is tracked upstream, also one a .gitignore matches (then the
  # agent's edit of it is part of the patch, as `git add -A` updates tracked files whatever ignores them)
  G --work-tree=/base add -A --force 2>/tmp/err/base.err || fail "adding the base failed"
  G --work-tree=/base commit -q --no-verify --allow-empty -m base || fail "committing the base failed"
  G --work-tree=/workspace add -A 2>/tmp/err/add.err || fail "adding the workspace failed (too large or unreadable?)"
fi
G diff --cached --binary --full-index --no-ext-diff --no-textconv --no-color --no-renames HEAD \
  | head -c "$((CAP + 1))" > "$OUT/patch.diff" || fail "diff failed"
G diff --cached --numstat --no-renames -z HEAD > /tmp/numstat || fail "numstat failed"
G diff --cached --raw --no-renames -z --full-index HEAD > /tmp/raw || fail "raw diff failed"
head -c 4194304 /tmp/numstat > "$OUT/numstat"  # the controller reads 4 MiB of each
head -c 4194304 /tmp/raw > "$OUT/raw"

size=$(wc -c < "$OUT/patch.diff")
if [ "$size" -gt "$CAP" ]; then fail "patch larger than $CAP bytes" 0; fi

# Verify tree: base + patch, protected paths restored from base.
if [ -n "$INC" ]; then
  rm -rf /verify/.git || fail "clearing the verify tree's .git failed"  # it is base already
else
  (cd /base && tar --exclude=./.git -cf - .) | (cd /verify && tar -xf -) || fail "copying the base failed"
fi
if [ "$size" -gt 0 ]; then
  (cd /verify && env -u GIT_DIR git -c core.hooksPath=/dev/null apply --binary --whitespace=nowarn \
      "$OUT/patch.diff") 2>/tmp/err/apply.err || fail "the patch does not apply to the base" 0
fi
for p in "$@"; do
  rm -rf "/verify/$p"
  if [ -e "/base/$p" ] || [ -L "/base/$p" ]; then
    mkdir -p "$(dirname "/verify/$p")"
    cp -a "/base/$p" "/verify/$p" || fail "restoring protected path $p failed"
  fi
done
keep_errors
printf 'ok\n' > "$OUT/status"
