#!/bin/sh
# Runs in a stage of a pruned base's build by hand: the min image less what prune.py dropped, once for
# each of the base's layers; POSIX sh, coreutils, findutils and perl-base (Essential in Debian and
# Ubuntu: the min image has no python).
# composer build itself reads the split stage's tree once and writes each layer by the same lists
# (composer/assembly/base_layers.py).
#
# Usage: keep_layer.sh [--all-folders] NAME [FILE...]
#
# Leaves in the stage only the files of layer NAME (/composer-layers/NAME.list: sorted paths
# without the leading /, from layers.py) and the folders that hold them (every folder with
# --all-folders: the first layer, the distribution's core, holds the whole tree of folders), writes
# the list into the image as /usr/share/triton-composer/pruned-base/NAME.list (so a layer is never
# empty, says what it holds, and the build's last stage names the stage by it), with each FILE of
# /composer-layers beside it, and gives every folder and those files one fixed time (0): files keep
# the min image's times, owners and modes. The files the engine mounts over in a step
# (/etc/hostname, /etc/hosts, /etc/resolv.conf; with Podman /run/.containerenv too) cannot be
# removed here: where the min image has them, every layer repeats them (a few bytes, the same in
# every layer).
#
# The removing is done by one perl process, started while the tools are still there: a layer
# without coreutils removes them too.
set -eu
all_folders=0
if [ "${1:-}" = "--all-folders" ]; then all_folders=1; shift; fi
name=$1
shift
work=/composer-layers
marks=usr/share/triton-composer/pruned-base
cd /
# Every file the engine mounts into this step stays: the ones named, and whatever else is a mount
# point here (Podman's builder also mounts /run/.containerenv; removing a mount point fails, EBUSY).
awk '{ print substr($5, 2) }' /proc/self/mountinfo | LC_ALL=C sort -u > "$work/mounts"
find . -xdev ! -type d ! -path "./composer-layers/*" ! -path ./etc/hosts ! -path ./etc/hostname \
  ! -path ./etc/resolv.conf ! -path ./.dockerenv -printf '%P\n' | LC_ALL=C sort \
  | LC_ALL=C comm -23 - "$work/mounts" > "$work/all"
LC_ALL=C comm -23 "$work/all" "$work/$name.list" > "$work/remove"
mkdir -p "$marks"
cp "$work/$name.list" "$marks/$name.list"
for file in "$@"; do cp "$work/$file" "$marks/$file"; done
# Every folder, deepest first (the engine's mounts and the work folder left out).
find . -xdev -depth \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./composer-layers \) -prune \
  -o -type d -print > "$work/folders"
cd "$work"
exec perl -e '
  my ($all_folders, $marks, @extra) = @ARGV;
  chdir "/" or die "keep_layer: /: $!\n";
  open(my $remove, "<", "/composer-layers/remove") or die "keep_layer: $!\n";
  while (my $path = <$remove>) {
    chomp $path;
    unlink $path or die "keep_layer: cannot remove /$path: $!\n";
  }
  open(my $folders, "<", "/composer-layers/folders") or die "keep_layer: $!\n";
  my @folders = map { chomp; $_ } <$folders>;
  unless ($all_folders) { rmdir $_ for grep { $_ ne "." } @folders }  # only the empty ones go
  for my $file (glob("/composer-layers/*")) { unlink $file or die "keep_layer: $file: $!\n" }
  rmdir "/composer-layers" or die "keep_layer: /composer-layers: $!\n";
  utime 0, 0, $_ for grep { -d $_ && ! -l $_ } @folders;
  utime 0, 0, @extra;
' "$all_folders" "$marks" "$marks/$name.list" $(for file in "$@"; do printf '%s\n' "$marks/$file"; done)
