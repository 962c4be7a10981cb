#!/usr/bin/env bash
# Packaging smoke test (time-boxed): build the Linux bundle, run --version and --self-test
# from it with a Python that has torch as the training interpreter, check its size.
#
#   packaging/smoke.sh                      # training Python: .venv/bin/python
#   TRAIN_PYTHON=/path/python SMOKE_TIMEOUT=900 MAX_MB=300 packaging/smoke.sh
#
# Needs the packaging extra (pip install -e ".[packaging]") and dpkg-deb. Exit 0 = passed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-"$root/.venv/bin/python"}
train=${TRAIN_PYTHON:-"$root/.venv/bin/python"}
limit=${SMOKE_TIMEOUT:-900}
max_mb=${MAX_MB:-300}
out=${OUT:-"$root/build/packaging-smoke"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

PYTHON="$python" OUT="$out" DEB_COMPRESSION=gzip timeout "$limit" \
  "$root/packaging/linux/build.sh" > "$tmp/build.log" 2>&1 || {
  tail -20 "$tmp/build.log" >&2; echo "smoke: the build failed (or took over $limit s)" >&2; exit 1; }
built=$(date +%s)
app="$out/dist/gpuwatch/gpuwatch"

version=$("$app" --version)
[ "$version" = "gpuwatch $("$python" -c 'import gpuwatch; print(gpuwatch.__version__)')" ] || {
  echo "smoke: --version printed '$version'" >&2; exit 1; }

# A clean environment: no settings, logs or display of the user's; offscreen Qt.
env -u DISPLAY -u WAYLAND_DISPLAY GPUWATCH_SETTINGS_DIR="$tmp/settings" \
  GPUWATCH_LOG_DIR="$tmp/logs" timeout 300 "$app" --self-test --python "$train" \
  --result "$tmp/self-test.json" || {
  cat "$tmp/self-test.json" >&2 2>/dev/null; echo "smoke: --self-test failed" >&2; exit 1; }

size_mb=$(du -sm "$out/dist/gpuwatch" | cut -f1)
if [ "$size_mb" -gt "$max_mb" ]; then
  echo "smoke: the bundle is $size_mb MB (limit $max_mb MB): something heavy got in" >&2
  exit 1
fi
end=$(date +%s)
echo "smoke: passed: $version, bundle $size_mb MB, build $((built - start)) s, checks $((end - built)) s"
