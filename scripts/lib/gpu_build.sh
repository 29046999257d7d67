# Shared by the scripts that build tiny-cuda-nn's torch bindings.

# patch_tcnn_setup SETUP_PY: setuptools 81 removed pkg_resources; packaging parses the versions
# the same way
patch_tcnn_setup() {
    sed -i 's/^from pkg_resources import parse_version$/from packaging.version import parse as parse_version/' "$1"
}
