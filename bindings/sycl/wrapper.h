/* The umbrella header of dpctl's SYCL C API (libDPCTLSyclInterface). Its own headers live in
 * <dpctl include>/syclinterface and include one another relative to that directory. */
#include "dpctl_sycl_interface.h"
