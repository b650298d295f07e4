#include "monitor_io.h"

namespace fg {

WriterOpener RequesterWriter::Opener(NetnsTarget netns) {
  return [netns = std::move(netns)]() -> Result<std::unique_ptr<CorrectionWriter>> {
    Result<NetlinkRequester> requester = NetlinkRequester::Open(netns);
    if (!requester.ok()) return requester.error();
    return std::unique_ptr<CorrectionWriter>(new RequesterWriter(std::move(requester.value())));
  };
}

}  // namespace fg
