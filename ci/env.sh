# Source this (after ci/setup) to run devbuf against the project's SYCL CPU runtime:
#   . ci/env.sh
# It registers Intel's CPU OpenCL runtime with the ICD loaders (its own .icd files carry a
# placeholder path), puts the runtime's libraries on the loader path (libOpenCL.so.1 in the venv has
# no RUNPATH for libsvml & co.), and tells devbuf where dpctl's SYCL C API library is.
_devbuf_root=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)
export DEVBUF_VENV=${DEVBUF_VENV:-$_devbuf_root/.venv}
_devbuf_site=$(echo "$DEVBUF_VENV"/lib/python3*/site-packages)
export OCL_ICD_FILENAMES="$DEVBUF_VENV/lib/libintelocl.so"
export LD_LIBRARY_PATH="$DEVBUF_VENV/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DEVBUF_SYCL_LIBRARY="$_devbuf_site/dpctl/libDPCTLSyclInterface.so"
export PATH="$DEVBUF_VENV/bin:$PATH"
unset _devbuf_root _devbuf_site
