"""Running the commands that write: supervision, ``exec``, ``run`` and the ffmpeg guard."""
