"""The systemd user units: installed byte for byte by the Arch package, written by `setup`."""
