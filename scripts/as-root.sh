#!/usr/bin/env bash
# Runs its arguments as root: directly when already root, else through sudo.
if [[ $EUID -eq 0 ]]; then exec "$@"; else exec sudo "$@"; fi
