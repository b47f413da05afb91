#!/usr/bin/env bash
# Packages a neve binary for x86_64 Linux (glibc):
#
#   neve-VERSION-x86_64-linux-gnu.tar.gz   the binary, the systemd unit, the
#                                          example settings, a README and the
#                                          licences, in neve-VERSION/
#   neve_VERSION_amd64.deb                 /usr/bin/neve, neve.service running
#                                          as the system user neve, settings
#                                          in /etc/neve/neve.toml (a conffile)
#   oci/                                   an image's build context (FROM
#                                          scratch: the binary, the libraries
#                                          `ldd` names, the CA bundle, uid 65532)
#   SHA256SUMS
#
# Usage: scripts/package.sh [--binary PATH] [--out DIR] [--image [--tag NAME]]
#   --binary PATH  package this neve (default: cargo build --release --locked
#                  -p neve, then $CARGO_TARGET_DIR/release/neve)
#   --out DIR      where the packages go (default: dist/ in the repository);
#                  only the files named above are replaced
#   --image        also `podman build` the image, tagged neve:VERSION
#   --tag NAME     the image's tag instead (with --image)
#   --strip        strip debug information from the packaged copy of the
#                  binary (the release profile keeps line tables for
#                  backtraces; the binary given is never modified)
#
# Needs: tar, gzip, dpkg-deb, ldd, sha256sum; readelf (binutils) for the
# libc6 version in Depends; dpkg -S for the libraries' copyright files in
# the image; podman for --image. SOURCE_DATE_EPOCH (default: the last
# commit's time) dates every file, so the same binary packs the same bytes.
# NEVE_DEB_MAINTAINER overrides the package's Maintainer field.
set -euo pipefail
umask 022

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { printf '[package] %s\n' "$*" >&2; }
die() { printf '[package] error: %s\n' "$*" >&2; exit 1; }

binary=""
out="$repo/dist"
image=no
tag=""
strip_debug=no
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) [ $# -ge 2 ] || die "--binary needs a path"; binary=$2; shift 2 ;;
    --binary=*) binary=${1#*=}; shift ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    --image) image=yes; shift ;;
    --tag) [ $# -ge 2 ] || die "--tag needs a name"; tag=$2; shift 2 ;;
    --tag=*) tag=${1#*=}; shift ;;
    --strip) strip_debug=yes; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -z "$tag" ] || [ "$image" = yes ] || die "--tag goes with --image"

for tool in tar gzip dpkg-deb ldd sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed"
done
if [ "$image" = yes ]; then
  command -v podman >/dev/null 2>&1 || die "--image needs podman (scripts/install-deps.sh installs it)"
fi

# --- the binary -------------------------------------------------------------
if [ -z "$binary" ]; then
  say "cargo build --release --locked -p neve"
  (cd "$repo" && cargo build --release --locked -p neve >&2)
  target_dir=${CARGO_TARGET_DIR:-target}
  case "$target_dir" in /*) ;; *) target_dir="$repo/$target_dir" ;; esac
  binary="$target_dir/release/neve"
fi
if [ ! -f "$binary" ] || [ ! -x "$binary" ]; then die "no executable at $binary"; fi
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")
# ELF, 64-bit, little-endian, e_machine 0x3e (x86-64).
elf=$(od -An -tx1 -N20 "$binary" | tr -d ' \n')
[ "${elf:0:8}" = 7f454c46 ] || die "$binary is not an ELF executable"
if [ "${elf:8:4}" != 0201 ] || [ "${elf:36:4}" != 3e00 ]; then die "$binary is not an x86-64 binary"; fi

# --- the version ------------------------------------------------------------
# `neve --version` prints `neve 0.1.0 (commit …, built …)`.
version=$("$binary" --version 2>/dev/null | awk 'NR == 1 && $1 == "neve" { print $2 }') || true
if [ -z "$version" ]; then
  version=$(awk '/^\[workspace\.package\]/ { p = 1; next } /^\[/ { p = 0 }
                 p && $1 == "version" { gsub(/"/, "", $3); print $3; exit }' "$repo/Cargo.toml")
  say "the binary did not say its version; using Cargo.toml's: $version"
fi
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$ ]] ||
  die "unexpected version '$version'"
# Debian orders 0.2.0~rc.1 before 0.2.0, as semver orders 0.2.0-rc.1.
deb_version=${version//-/\~}

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The copy that is packaged (stripped with --strip).
packed="$work/neve"
cp "$binary" "$packed"
chmod 0755 "$packed"
if [ "$strip_debug" = yes ]; then
  command -v strip >/dev/null 2>&1 || die "--strip needs strip (binutils)"
  strip --strip-debug "$packed"
fi

# --- the libraries it loads -------------------------------------------------
# Paths as `ldd` prints them (the loader by its PT_INTERP path), so the
# image holds them where the binary and the loader look.
libs=()
ldd_out=$(ldd "$packed" 2>&1) || true
if ! grep -qE 'statically linked|not a dynamic executable' <<<"$ldd_out"; then
  if grep -q 'not found' <<<"$ldd_out"; then
    die "ldd cannot find a library of $binary:"$'\n'"$ldd_out"
  fi
  while read -r first arrow path _; do
    case "$first" in linux-vdso.so.*|linux-gate.so.*) continue ;; esac
    if [ "$arrow" = "=>" ]; then
      if [ -n "$path" ]; then libs+=("$path"); fi
    elif [[ "$first" == /* ]]; then
      libs+=("$first")
    fi
  done <<<"$ldd_out"
fi

# Depends: the Debian package of each library, libc6 at the newest GLIBC_
# symbol version the binary asks for.
depends=()
for lib in "${libs[@]}"; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libutil.so.*|ld-linux-x86-64.so.*)
      dep=libc6 ;;
    libgcc_s.so.*) dep=libgcc-s1 ;;
    *) die "$binary loads $lib: add its Debian package to scripts/package.sh's Depends" ;;
  esac
  [[ " ${depends[*]} " == *" $dep "* ]] || depends+=("$dep")
done
if [[ " ${depends[*]} " == *" libc6 "* ]] && command -v readelf >/dev/null 2>&1; then
  glibc=$(readelf -V --wide "$packed" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  if [ -n "$glibc" ]; then
    depends=("${depends[@]/#libc6/libc6 (>= $glibc)}")
  fi
fi
depends_field=""
while IFS= read -r dep; do
  if [ -n "$dep" ]; then depends_field+="${depends_field:+, }$dep"; fi
done < <(printf '%s\n' "${depends[@]}" | sort)

# --- the packaged systemd unit ------------------------------------------------
# deploy/systemd/neve.service with the package's paths and its system user
# in place of DynamicUser=, every sandboxing line kept.
unit_src="$repo/deploy/systemd/neve.service"
packaged_unit="$work/neve.service"
{
  cat <<'HEAD'
# neve as installed by its Debian package: the system user neve (created by
# the package), the store in /var/lib/neve (StateDirectory), the file system
# read-only to it otherwise, and SIGTERM draining requests in flight before
# exit. Not enabled on install; set the upstream first:
#
#   $EDITOR /etc/neve/neve.toml        # upstream, listen, retention, …
#   systemctl enable --now neve
#
# An upstream URL with credentials is better kept in /etc/neve/neve.env
# (mode 0600) as NEVE_UPSTREAM=…, which wins over the file.
# `neve config --config /etc/neve/neve.toml` shows what the service will
# run with. Made by scripts/package.sh from deploy/systemd/neve.service.
HEAD
  awk '
    !started && /^#/ { next }
    { started = 1 }
    /^ExecStart=\/usr\/local\/bin\/neve / { sub(/\/usr\/local\/bin\/neve/, "/usr/bin/neve"); execs++ }
    /^DynamicUser=yes$/ {
      print "User=neve"
      print "Group=neve"
      print "# What DynamicUser= implied besides the user (the rest is below)."
      print "RemoveIPC=yes"
      users++
      next
    }
    { print }
    END { if (execs != 1 || users != 1) exit 1 }
  ' "$unit_src"
} >"$packaged_unit" ||
  die "deploy/systemd/neve.service no longer has one 'ExecStart=/usr/local/bin/neve …' and one 'DynamicUser=yes': update the unit rewrite in scripts/package.sh"
for line in '^StateDirectory=neve$' '^EnvironmentFile=-/etc/neve/neve.env$' ' --config /etc/neve/neve.toml '; do
  grep -q -- "$line" "$packaged_unit" ||
    die "deploy/systemd/neve.service no longer matches '$line': update scripts/package.sh"
done

# --- the release archive --------------------------------------------------------
# README.md's sections an operator of a bare binary needs.
readme_sections=("Installing" "Running neve" "Following a provider's endpoint" "Configuration" "Deploying")
excerpt=""
for section in "${readme_sections[@]}"; do
  text=$(awk -v want="## $section" '
    $0 == want { p = 1; print; next }
    p && /^## / { exit }
    p { print }' "$repo/README.md")
  if [ -n "$text" ]; then excerpt+="$text"$'\n\n'; fi
done
[ -n "$excerpt" ] || die "none of README.md's sections (${readme_sections[*]}) found"

name="neve-$version"
archive="$name-x86_64-linux-gnu.tar.gz"
stage="$work/archive/$name"
mkdir -p "$stage"
install -m 0755 "$packed" "$stage/neve"
install -m 0644 "$unit_src" "$stage/neve.service"
install -m 0644 "$repo/deploy/neve.example.toml" "$stage/neve.example.toml"
install -m 0644 "$repo/deploy/debian/copyright" "$stage/COPYRIGHT"
{
  cat <<EOF
# neve $version for x86_64 Linux (glibc)

A read-only mirror for EVM chains. This archive holds:

    neve                 the binary
    neve.service         a systemd unit (expects the binary in /usr/local/bin)
    neve.example.toml    every \`neve serve\` setting with its default
    COPYRIGHT            licences: neve's (MIT OR Apache-2.0) and the crates'

As a systemd service:

    sudo install -m 0755 neve /usr/local/bin/neve
    sudo install -m 0644 neve.service /etc/systemd/system/
    sudo install -d /etc/neve && sudo install -m 0644 neve.example.toml /etc/neve/neve.toml
    sudoedit /etc/neve/neve.toml        # upstream, listen, retention, …
    sudo systemctl daemon-reload && sudo systemctl enable --now neve

By hand: \`./neve serve --upstream http://127.0.0.1:8545 --data-dir neve-data\`.

What follows is from neve's README.

EOF
  printf '%s' "$excerpt"
} >"$stage/README.md"
chmod 0644 "$stage/README.md"
rm -f "$out/$archive"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
  -C "$work/archive" -cf - "$name" | gzip -n -9 >"$out/$archive"

# --- the Debian package -----------------------------------------------------------
deb="neve_${deb_version}_amd64.deb"
root="$work/deb"
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" \
  "$root/etc/neve" "$root/usr/share/doc/neve"
install -m 0755 "$packed" "$root/usr/bin/neve"
install -m 0644 "$packaged_unit" "$root/lib/systemd/system/neve.service"
install -m 0644 "$repo/deploy/neve.example.toml" "$root/etc/neve/neve.toml"
install -m 0644 "$repo/deploy/debian/copyright" "$root/usr/share/doc/neve/copyright"
for script in postinst prerm postrm; do
  install -m 0755 "$repo/deploy/debian/$script" "$root/DEBIAN/$script"
done
install -m 0644 "$repo/deploy/debian/conffiles" "$root/DEBIAN/conffiles"
installed_size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
maintainer=${NEVE_DEB_MAINTAINER:-neve developers <https://github.com/neve-rs/neve/issues>}
sed -e "s|@VERSION@|$deb_version|" -e "s|@INSTALLED_SIZE@|$installed_size|" \
    -e "s|@DEPENDS@|$depends_field|" -e "s|@MAINTAINER@|$maintainer|" \
    "$repo/deploy/debian/control.in" | sed '/^Depends: $/d' >"$root/DEBIAN/control"
chmod 0644 "$root/DEBIAN/control"
rm -f "$out/$deb"
dpkg-deb --root-owner-group --build "$root" "$out/$deb" >/dev/null

# --- the image's build context --------------------------------------------------
oci="$out/oci"
rm -rf "$oci"
rootfs="$oci/rootfs"
install -d -m 0755 "$oci" "$rootfs/usr/bin" "$rootfs/etc/ssl/certs" "$rootfs/usr/share/doc/neve" \
  "$rootfs/var/lib"
install -d -m 0755 "$oci/state"
install -d -m 0700 "$oci/state/neve"
install -m 0644 "$repo/deploy/oci/Containerfile" "$oci/Containerfile"
install -m 0755 "$packed" "$rootfs/usr/bin/neve"
for lib in "${libs[@]}"; do
  mkdir -p "$rootfs$(dirname "$lib")"
  chmod 0755 "$rootfs$(dirname "$lib")"
  cp -L --preserve=mode "$lib" "$rootfs$lib"
done
ca=/etc/ssl/certs/ca-certificates.crt
[ -f "$ca" ] || die "no CA bundle at $ca (install ca-certificates)"
install -m 0644 "$ca" "$rootfs$ca"
for file in passwd group nsswitch.conf; do
  install -m 0644 "$repo/deploy/oci/$file" "$rootfs/etc/$file"
done
install -m 0644 "$repo/deploy/debian/copyright" "$rootfs/usr/share/doc/neve/copyright"
# The licences of what was copied from the build machine's packages.
if command -v dpkg >/dev/null 2>&1; then
  for file in "${libs[@]}" "$ca"; do
    if [ "$file" = "$ca" ]; then
      # Made by update-ca-certificates, owned by no package.
      pkg="ca-certificates"
    else
      pkg=$(dpkg -S "$file" 2>/dev/null || dpkg -S "$(readlink -f "$file")" 2>/dev/null || true)
      pkg=${pkg%%:*}
    fi
    if [ -n "$pkg" ] && [ -f "/usr/share/doc/$pkg/copyright" ]; then
      install -D -m 0644 "/usr/share/doc/$pkg/copyright" "$rootfs/usr/share/doc/$pkg/copyright"
    else
      say "warning: no Debian copyright file found for $file"
    fi
  done
else
  say "warning: no dpkg: the libraries' copyright files are not in the image"
fi
find "$rootfs" -type d -exec chmod 0755 {} +
find "$oci" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

(cd "$out" && sha256sum "$archive" "$deb" >SHA256SUMS)

image_id=""
if [ "$image" = yes ]; then
  tag=${tag:-neve:$version}
  say "podman build -t $tag"
  podman build --quiet --layers=false --format oci --timestamp "$SOURCE_DATE_EPOCH" \
    --build-arg "VERSION=$version" -t "$tag" -f "$oci/Containerfile" "$oci" >"$work/podman.out" ||
    die "podman build failed"
  image_id=$(tail -1 "$work/podman.out")
fi

# --- what was made ------------------------------------------------------------------
echo "neve $version packaged from $binary:"
for file in "$archive" "$deb"; do
  printf '  %-52s %s\n' "$out/$file" "$(du -h "$out/$file" | cut -f1)"
done
printf '  %-52s %s\n' "$oci/" "image build context (${#libs[@]} libraries from ldd)"
printf '  %-52s\n' "$out/SHA256SUMS"
if [ -n "$image_id" ]; then
  printf '  image %-46s %s\n' "$tag" "${image_id:0:12}"
fi
