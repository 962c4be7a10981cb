#!/bin/sh
# Per-user install of gpuwatch from the tarball: no root, nothing outside your home.
#   ./install.sh            installs into ~/.local (app in ~/.local/opt/gpuwatch)
#   PREFIX=/some/dir ./install.sh
# It writes ~/.local/opt/gpuwatch/uninstall.sh, which removes exactly what was installed
# and leaves your recordings and settings alone.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
prefix=${PREFIX:-"$HOME/.local"}
app="$prefix/opt/gpuwatch"
data=${XDG_DATA_HOME:-"$HOME/.local/share"}
[ -x "$here/gpuwatch/gpuwatch" ] || { echo "install.sh: run it from the unpacked tarball (gpuwatch/ is missing)" >&2; exit 1; }

rm -rf "$app"
mkdir -p "$prefix/opt" "$prefix/bin" "$data/applications"
cp -a "$here/gpuwatch" "$app"
ln -sf "$app/gpuwatch" "$prefix/bin/gpuwatch"
sed "s|@EXEC@|\"$app/gpuwatch\"|" "$here/share/gpuwatch.desktop" > "$data/applications/gpuwatch.desktop"
icons=""
icon_dirs=""
for png in "$here"/share/icons/hicolor/*/apps/gpuwatch.*; do
  rel=${png#"$here/share/icons/"}
  mkdir -p "$data/icons/$(dirname "$rel")"
  cp "$png" "$data/icons/$rel"
  icons="$icons \"$data/icons/$rel\""
  size_dir=$(dirname "$(dirname "$rel")")
  icon_dirs="$icon_dirs \"$data/icons/$size_dir/apps\" \"$data/icons/$size_dir\""
done

cat > "$app/uninstall.sh" <<UNINSTALL
#!/bin/sh
# Removes gpuwatch as installed by install.sh. Settings (~/.config/gpuwatch), logs
# (~/.local/state/gpuwatch) and recordings (~/Documents/gpuwatch) stay: they are yours.
rm -f "$prefix/bin/gpuwatch" "$data/applications/gpuwatch.desktop"$icons
rm -rf "$app"
# The icon folders used above go too once empty (rmdir leaves a folder with anything in it).
for dir in$icon_dirs "$data/icons/hicolor" "$data/icons" "$prefix/opt"; do
  rmdir "\$dir" 2>/dev/null || true
done
command -v update-desktop-database >/dev/null && update-desktop-database "$data/applications" || true
echo "gpuwatch removed (your settings and recordings were kept)"
UNINSTALL
chmod +x "$app/uninstall.sh"
command -v update-desktop-database >/dev/null && update-desktop-database "$data/applications" || true
echo "gpuwatch installed in $app"
echo "  menu entry: $data/applications/gpuwatch.desktop; command: $prefix/bin/gpuwatch"
echo "  to remove it: $app/uninstall.sh"
