#!/usr/bin/env bash
# Build gpuwatch for Linux: the PyInstaller folder, a tarball (per-user install.sh inside)
# and a .deb (system-wide: /opt/gpuwatch, /usr/bin/gpuwatch, menu entry, icons).
#
#   packaging/linux/build.sh            # uses .venv/bin/python (needs: pip install -e ".[packaging]")
#   PYTHON=/path/to/python OUT=/tmp/out DEB_COMPRESSION=gzip packaging/linux/build.sh
#
# Outputs in $OUT (default build/packaging): gpuwatch/ (the app folder),
# gpuwatch-VERSION-linux-ARCH.tar.gz and gpuwatch_VERSION_ARCH.deb. Fails if torch,
# torchvision or triton got into the bundle (training runs in the user's own Python).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-"$root/.venv/bin/python"}
out=${OUT:-"$root/build/packaging"}
cd "$root"
version=$("$python" -c "import gpuwatch; print(gpuwatch.__version__)")
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
start=$(date +%s)

echo "== PyInstaller ($("$python" -m PyInstaller --version))"
"$python" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath "$out/dist" --workpath "$out/work" packaging/pyinstaller/gpuwatch.spec
bundle="$out/dist/gpuwatch"

echo "== checking the bundle"
leaked=$(find "$bundle/_internal" -maxdepth 2 \( -iname 'torch*' -o -iname 'libtorch*' \
  -o -iname 'triton*' -o -iname 'torchvision*' \) -not -path '*/runner-src/*' | head -5)
if [ -n "$leaked" ]; then
  echo "build.sh: torch got into the bundle (it must stay out):" >&2
  echo "$leaked" >&2
  exit 1
fi
for need in runner-src/gpuwatch/runner/__main__.py runner-src/gpuwatch/protocol.py \
            gpuwatch/core/run/interpreter_survey.py gpuwatch/qt/assets/gpuwatch.svg; do
  [ -f "$bundle/_internal/$need" ] || { echo "build.sh: $need missing from the bundle" >&2; exit 1; }
done

share=$(mktemp -d)
trap 'rm -rf "$share"' EXIT
mkdir -p "$share/icons/hicolor/scalable/apps"
cp assets/gpuwatch.svg "$share/icons/hicolor/scalable/apps/gpuwatch.svg"
for png in assets/png/gpuwatch-*.png; do
  size=$(basename "$png" .png); size=${size#gpuwatch-}
  mkdir -p "$share/icons/hicolor/${size}x${size}/apps"
  cp "$png" "$share/icons/hicolor/${size}x${size}/apps/gpuwatch.png"
done
cp packaging/linux/gpuwatch.desktop "$share/gpuwatch.desktop"

echo "== tarball"
stage="$out/tar/gpuwatch-$version"
rm -rf "$out/tar" && mkdir -p "$stage"
cp -a "$bundle" "$stage/gpuwatch"
cp -a "$share" "$stage/share"
cp packaging/linux/install.sh "$stage/install.sh"
tarball="$out/gpuwatch-$version-linux-$arch.tar.gz"
tar -C "$out/tar" -czf "$tarball" "gpuwatch-$version"

if ! command -v dpkg-deb >/dev/null; then
  echo "== dpkg-deb not found: no .deb (the app folder and the tarball are made)"
  rm -rf "$out/tar"
  echo "app folder: $bundle ($(du -sh "$bundle" | cut -f1)); tarball: $tarball"
  exit 0
fi
echo "== .deb"
deb_root="$out/deb/gpuwatch"
rm -rf "$out/deb" && mkdir -p "$deb_root/DEBIAN" "$deb_root/opt" "$deb_root/usr/bin" \
  "$deb_root/usr/share/applications"
cp -a "$bundle" "$deb_root/opt/gpuwatch"
ln -s /opt/gpuwatch/gpuwatch "$deb_root/usr/bin/gpuwatch"
sed 's|@EXEC@|gpuwatch|' "$share/gpuwatch.desktop" > "$deb_root/usr/share/applications/gpuwatch.desktop"
cp -a "$share/icons" "$deb_root/usr/share/icons"
size_kb=$(du -sk "$deb_root" | cut -f1)
# getconf, not `ldd --version | head -1`: under pipefail, head closing the pipe early makes
# ldd die of SIGPIPE and the build stop here (18 of 30 runs on this machine).
glibc=$(getconf GNU_LIBC_VERSION | grep -oE '[0-9]+\.[0-9]+$')
# The system libraries Qt's X11 platform plugin loads: the table the first-launch check
# (gpuwatch/qt_preflight.py) names packages from, so the .deb and that message agree.
qt_depends=$("$python" -c "from gpuwatch.qt_preflight import DEB_DEPENDS; print(', '.join(DEB_DEPENDS))")
cat > "$deb_root/DEBIAN/control" <<CONTROL
Package: gpuwatch
Version: $version
Architecture: $arch
Maintainer: gpuwatch developers <gpuwatch@users.noreply.github.com>
Installed-Size: $size_kb
Depends: libc6 (>= $glibc), $qt_depends
Recommends: python3
Section: devel
Priority: optional
Homepage: https://github.com/gpuwatch/gpuwatch
Description: see why a PyTorch training loop is slow while it runs
 Launches a PyTorch training job, shows a live timeline of when the device is busy
 and idle beside NVML utilization, and lets you flip the usual optimizations live.
 The app has no torch inside: training runs in a Python with torch that you choose
 (Run > Choose Python...). Recordings replay without torch.
CONTROL
for script in postinst postrm; do
  cat > "$deb_root/DEBIAN/$script" <<'HOOK'
#!/bin/sh
set -e
if command -v update-desktop-database >/dev/null 2>&1; then update-desktop-database -q /usr/share/applications || true; fi
if command -v gtk-update-icon-cache >/dev/null 2>&1; then gtk-update-icon-cache -q -t /usr/share/icons/hicolor || true; fi
exit 0
HOOK
  chmod 0755 "$deb_root/DEBIAN/$script"
done
cat > "$deb_root/DEBIAN/prerm" <<'HOOK'
#!/bin/sh
set -e
# A training Python run as root compiles the runner's source in place: remove its caches,
# or dpkg could not remove /opt/gpuwatch.
if [ -d /opt/gpuwatch ]; then find /opt/gpuwatch -name __pycache__ -type d -prune -exec rm -rf {} +; fi
exit 0
HOOK
chmod 0755 "$deb_root/DEBIAN/prerm"
deb="$out/gpuwatch_${version}_${arch}.deb"
# xz: the smallest .deb; smoke.sh passes gzip (much faster, same content).
dpkg-deb --root-owner-group "-Z${DEB_COMPRESSION:-xz}" --build "$deb_root" "$deb" >/dev/null

rm -rf "$out/tar" "$out/deb"
end=$(date +%s)
echo "== done in $((end - start)) s"
echo "app folder: $bundle ($(du -sh "$bundle" | cut -f1))"
echo "tarball:    $tarball ($(du -h "$tarball" | cut -f1))"
echo "deb:        $deb ($(du -h "$deb" | cut -f1))"
