/* libnvinfer_plugin.so.10 stand-in: registers no plugin, but answers as TensorRT's does. */
#include <stdbool.h>

#include "standin.h"

STANDIN_NOTE("libnvinfer_plugin.so.10");

STANDIN_EXPORT bool initLibNvInferPlugins(void* logger, const char* lib_namespace);

/* Taking the version from libnvinfer gives this library its NEEDED libnvinfer.so.10, as the
 * real plugin library has, so a collector of NEEDED entries meets the same graph. */
bool initLibNvInferPlugins(void* logger, const char* lib_namespace) {
  (void)logger;
  (void)lib_namespace;
  return getInferLibVersion() == STANDIN_TRT_VERSION;
}
