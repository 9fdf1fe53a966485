#!/bin/sh
# Put the `janitor` just installed where every new shell finds it, as pipx does: a symbolic
# link in the first of these folders that is on PATH and writable:
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
# The README's quick start runs this after either of its installs. The `janitor` it links is
# the active environment's ($VIRTUAL_ENV: the fallback's ./.venv, or one the user made), else
# the one `python3` installed (its scripts folder, or its user scheme's: pip's --user), else
# the one this shell finds; a link there (this script's, from an earlier install: Debian's
# python3 puts scripts in /usr/local/bin) is followed to the file it names. Without the link, a new shell that has no environment active (or
# no pyenv) says `janitor: command not found`. Where that janitor is in one of the folders
# above already, nothing is linked. It replaces only a link of an older install's (a Python
# installation's or environment's bin folder, or one gone), never a file nor another
# program's link.
# Exit 0 linked, or nothing to link (a startup file it could not write is said, not fatal);
# 2 no janitor installed, no HOME, or something else in the way: then nothing was changed.
set -eu

installed() {
    # The janitor of the active environment, else of python3's install schemes, else on PATH.
    if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/janitor" ]; then
        echo "$VIRTUAL_ENV/bin/janitor"
        return 0
    fi
    if command -v python3 >/dev/null 2>&1; then
        found=$(python3 -c 'import os, sysconfig
schemes = [sysconfig.get_default_scheme(), sysconfig.get_preferred_scheme("user")]
for scheme in schemes:
    path = os.path.join(sysconfig.get_path("scripts", scheme), "janitor")
    if os.access(path, os.X_OK):
        print(os.path.realpath(path))
        break' 2>/dev/null) || found=""
        if [ -n "$found" ]; then
            echo "$found"
            return 0
        fi
    fi
    found=$(command -v janitor 2>/dev/null) || return 1
    # A link (this script's, from an earlier install) names the file to link to.
    if [ -L "$found" ]; then found=$(readlink "$found"); fi
    case "$found" in /*) echo "$found" ;; *) return 1 ;; esac
}

if ! target=$(installed); then
    echo "link-janitor: no janitor installed: pip install . first (or . .venv/bin/activate)" >&2
    exit 2
fi
if [ -z "${HOME:-}" ]; then
    echo "link-janitor: HOME is not set; set it to your home folder, then run this again" >&2
    exit 2
fi

on_path() {
    case ":$PATH:" in *":$1:"*) return 0 ;; esac
    return 1
}

dir=""
in_place=""
for candidate in "$HOME/.local/bin" "$HOME/bin" /usr/local/bin /usr/bin; do
    if [ "${target%/janitor}" = "$candidate" ]; then
        # pip put it in one of these already (root's /usr/local/bin, pip --user's
        # ~/.local/bin): a link beside it would be a link to itself.
        dir=$candidate
        in_place=1
        break
    fi
done
if [ -z "$dir" ]; then
    for candidate in "$HOME/.local/bin" "$HOME/bin" /usr/local/bin /usr/bin; do
        if on_path "$candidate" && [ -d "$candidate" ] && [ -w "$candidate" ]; then
            dir=$candidate
            break
        fi
    done
fi
off_path=""
if [ -z "$dir" ]; then
    dir="$HOME/.local/bin"
fi
if ! on_path "$dir"; then
    off_path=1
fi

# What is there already: nothing, or a link to a janitor of an environment (a folder with
# pyvenv.cfg) or of a Python installation (a bin folder with python3), or to nothing any
# more; anything else is someone else's, and stays.
link="$dir/janitor"
if [ -n "$in_place" ]; then
    :
elif [ -L "$link" ]; then
    old=$(readlink "$link")
    foreign=""
    if [ "$old" != "$target" ] && [ -e "$old" ]; then
        case "$old" in
            */bin/janitor)
                if [ ! -f "${old%/bin/janitor}/pyvenv.cfg" ] && [ ! -x "${old%/janitor}/python3" ]; then
                    foreign=1
                fi ;;
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

if [ -z "$in_place" ]; then
    mkdir -p "$dir"
    ln -sfn "$target" "$link"
fi

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
if [ -n "$in_place" ]; then
    echo "link-janitor: new shells run $target (pip put it there; nothing to link)$said"
else
    echo "link-janitor: new shells run $link -> $target$said"
fi
