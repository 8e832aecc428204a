# The step runner the device check scripts share (sourced; needs $out and $fail set by the caller).
# step NAME LIMIT_S CMD...: runs CMD under a time limit, its output to the console and $out/NAME.log; a failure sets fail=1.
step() {
  local name="$1" limit="$2"
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
  local rc="${PIPESTATUS[0]}"
  [ "$rc" -eq 0 ] || { echo "== $name FAILED (exit $rc)"; fail=1; }
}
