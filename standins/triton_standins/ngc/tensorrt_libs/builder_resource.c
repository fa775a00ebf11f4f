/* libnvinfer_builder_resource.so.10.4.0 stand-in: TensorRT loads it only to build engines;
 * it holds data, so the stand-in holds its note (pad.sh gives it its real size). */
#include "standin.h"

STANDIN_NOTE("libnvinfer_builder_resource.so.10.4.0");

STANDIN_EXPORT int32_t standin_builderResourceVersion(void);

int32_t standin_builderResourceVersion(void) { return STANDIN_TRT_VERSION; }
