#!/bin/sh
# Put the active environment's `janitor` where every new shell finds it, as pipx does: a
# symbolic link in the first of ~/.local/bin and /usr/local/bin that is on PATH and writable
# (root writes /usr/local/bin), else in ~/.local/bin with the line that puts it on PATH.
#
# The README's quick start runs this when the Python refuses outside installs ("externally
# managed", Debian and Homebrew) and `janitor` went into ./.venv instead: without it a new shell
# says `janitor: command not found`. It replaces only a link (an older clone's), never a file.
# Exit 0 linked (or nothing to do), 2 nothing to link or a file is in the way.
set -eu

if [ -z "${VIRTUAL_ENV:-}" ] || [ ! -x "$VIRTUAL_ENV/bin/janitor" ]; then
    echo "link-janitor: no janitor in an active environment: . .venv/bin/activate && pip install . first" >&2
    exit 2
fi
target="$VIRTUAL_ENV/bin/janitor"

dir=""
for candidate in "$HOME/.local/bin" /usr/local/bin; do
    case ":$PATH:" in
        *":$candidate:"*) if [ -d "$candidate" ] && [ -w "$candidate" ]; then dir=$candidate; break; fi ;;
    esac
done
if [ -z "$dir" ]; then
    dir="$HOME/.local/bin"
    mkdir -p "$dir"
    echo "link-janitor: $dir is not on PATH; add it: echo 'export PATH=\"$dir:\$PATH\"' >> ~/.profile"
fi

link="$dir/janitor"
if [ -e "$link" ] && [ ! -L "$link" ]; then
    echo "link-janitor: $link is a file, not a link; move it away, then run this again" >&2
    exit 2
fi
ln -sfn "$target" "$link"
echo "link-janitor: new shells run $link -> $target"
