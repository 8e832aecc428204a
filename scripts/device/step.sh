# The step runner and unpacker the device check scripts share (sourced; step needs $out and $fail set by the caller).
# step NAME LIMIT_S CMD...: runs CMD under a time limit, its output to the console and $out/NAME.log; a failure sets fail=1.
step() {
  local name="$1" limit="$2"
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
  local rc="${PIPESTATUS[0]}"
  [ "$rc" -eq 0 ] || { echo "== $name FAILED (exit $rc)"; fail=1; }
}
# unpack TARBALL DIR: extracts the carried xz tarball into DIR (tar, or Python's tarfile where tar lacks xz).
unpack() {
  mkdir -p "$2"
  tar -C "$2" -xJf "$1" 2> /dev/null || python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$1" "$2"
}
