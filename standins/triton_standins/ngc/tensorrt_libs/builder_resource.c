/* libnvinfer_builder_resource.so.10.<minor>.<patch> stand-in: TensorRT loads it only to build engines;
 * it holds data, so the stand-in holds its note (pad.sh gives it its real size). */
#include "standin.h"

STANDIN_NOTE("libnvinfer_builder_resource.so.10." STANDIN_STR(TRT_MINOR) "." STANDIN_STR(TRT_PATCH));

STANDIN_EXPORT int32_t standin_builderResourceVersion(void);

int32_t standin_builderResourceVersion(void) { return STANDIN_TRT_VERSION; }
