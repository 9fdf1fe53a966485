#!/bin/sh
# Put the active environment's `janitor` where every new shell finds it, as pipx does: a
# symbolic link in the first of these folders that is on PATH and writable:
#
#   ~/.local/bin, ~/bin     a user's own (pipx's choice; Debian's ~/.profile adds both)
#   /usr/local/bin          root's, or a Mac with Homebrew's (pip's choice as root)
#   /usr/bin                root's, only when PATH is as short as cron's or `env -i`'s
#                           (/usr/bin:/bin), where no other folder would be found
#
# else in ~/.local/bin, and then, as rustup and uv's installer do, it adds that folder to PATH
# in ~/.profile, in ~/.bash_profile and ~/.bashrc where they exist (bash reads no ~/.profile
# when it has a ~/.bash_profile), and in ~/.zshrc where it exists or zsh is the shell (a
# Mac's): new shells find it. JANITOR_NO_MODIFY_PATH=1 leaves those files alone and prints the
# line to add instead.
#
# The README's quick start runs this when the Python refuses outside installs ("externally
# managed", Debian and Homebrew) and `janitor` went into ./.venv instead: without it a new shell
# says `janitor: command not found`. It replaces only a link of an older environment's
# (a clone's .venv, or one gone), never a file nor another program's link.
# Exit 0 linked (a startup file it could not write is said, not fatal); 2 nothing to link, no
# HOME, or something else in the way: then nothing was changed.
set -eu

if [ -z "${VIRTUAL_ENV:-}" ] || [ ! -x "$VIRTUAL_ENV/bin/janitor" ]; then
    echo "link-janitor: no janitor in an active environment: . .venv/bin/activate && pip install . first" >&2
    exit 2
fi
if [ -z "${HOME:-}" ]; then
    echo "link-janitor: HOME is not set; set it to your home folder, then run this again" >&2
    exit 2
fi
target="$VIRTUAL_ENV/bin/janitor"

on_path() {
    case ":$PATH:" in *":$1:"*) return 0 ;; esac
    return 1
}

dir=""
for candidate in "$HOME/.local/bin" "$HOME/bin" /usr/local/bin /usr/bin; do
    if on_path "$candidate" && [ -d "$candidate" ] && [ -w "$candidate" ]; then
        dir=$candidate
        break
    fi
done
off_path=""
if [ -z "$dir" ]; then
    dir="$HOME/.local/bin"
    off_path=1
fi

# What is there already: nothing, or a link to a janitor of an environment (a folder with
# pyvenv.cfg) or to nothing any more; anything else is someone else's, and stays.
link="$dir/janitor"
if [ -L "$link" ]; then
    old=$(readlink "$link")
    foreign=""
    if [ "$old" != "$target" ] && [ -e "$old" ]; then
        case "$old" in
            */bin/janitor) if [ ! -f "${old%/bin/janitor}/pyvenv.cfg" ]; then foreign=1; fi ;;
            *) foreign=1 ;;
        esac
    fi
    if [ -n "$foreign" ]; then
        echo "link-janitor: $link is a link to $old, not to an environment's janitor; move it away, then run this again" >&2
        exit 2
    fi
elif [ -e "$link" ]; then
    echo "link-janitor: $link is a file, not a link; move it away, then run this again" >&2
    exit 2
fi

mkdir -p "$dir"
ln -sfn "$target" "$link"

# Where the folder is not on PATH: one line, guarded so that a shell that has the folder on
# PATH already does not add it twice, appended once to each startup file.
line="export PATH=\"$dir:\$PATH\""
guarded="case \":\$PATH:\" in *\":$dir:\"*) ;; *) $line ;; esac  # space-janitor"
added=""
failed=""
add_to() {
    if grep -qsF "$guarded" "$1"; then
        return 0
    fi
    if printf '\n%s\n' "$guarded" 2>/dev/null >> "$1"; then
        added="${added:+$added and }~/${1#"$HOME"/}"
    else
        failed="${failed:+$failed and }~/${1#"$HOME"/}"
    fi
}
said=""
if [ -n "$off_path" ]; then
    if [ -n "${JANITOR_NO_MODIFY_PATH:-}" ]; then
        said="; $dir is not on PATH: add it with: echo '$line' >> ~/.profile"
    else
        add_to "$HOME/.profile"
        for rc in "$HOME/.bash_profile" "$HOME/.bash_login" "$HOME/.bashrc"; do
            if [ -f "$rc" ]; then add_to "$rc"; fi
        done
        # zsh (a Mac's shell) reads no ~/.profile.
        shell=${SHELL:-}
        if [ -f "$HOME/.zshrc" ] || [ "${shell##*/}" = zsh ]; then add_to "$HOME/.zshrc"; fi
        if [ -n "$added" ]; then
            said="; $dir is not on PATH here: added it for new shells in $added"
        elif [ -z "$failed" ]; then
            said="; $dir is not on PATH here: the startup files add it for new shells"
        fi
        if [ -n "$failed" ]; then
            said="$said; could not write $failed: add it there with: $line"
        fi
    fi
fi
echo "link-janitor: new shells run $link -> $target$said"
