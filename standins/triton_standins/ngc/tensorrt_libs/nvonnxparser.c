/* libnvonnxparser.so.10 stand-in: version and parser factory entry points; parses nothing. */
#include "standin.h"

STANDIN_NOTE("libnvonnxparser.so.10");

STANDIN_EXPORT int getNvOnnxParserVersion(void);
STANDIN_EXPORT void* createNvOnnxParser_INTERNAL(void* network, void* logger, int version);

int getNvOnnxParserVersion(void) { return STANDIN_TRT_VERSION; }

void* createNvOnnxParser_INTERNAL(void* network, void* logger, int version) {
  (void)network;
  (void)logger;
  (void)version;
  return 0; /* no parser: building engines needs the real TensorRT and a GPU */
}
