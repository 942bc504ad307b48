//! The stream transport's start-up: listen in phase 1 (the socket name is derived from the
//! job id and the rank, so there is no card to publish), learn the peers in phase 2.

use tsunagi_p2p::boot::{Bootstrap, Reach, StartInfo, Starting, TransportFactory};
use tsunagi_p2p::{P2pError, Transport};

use crate::StreamTransport;

/// The stream transport's registration (`TSUNAGI_INTERNODE=stream`).
pub struct StreamFactory;

/// The one instance to list in a registry.
pub static FACTORY: StreamFactory = StreamFactory;

impl TransportFactory for StreamFactory {
    fn name(&self) -> &'static str {
        "stream"
    }
    fn reach(&self) -> Reach {
        Reach::Remote
    }
    fn card_format(&self) -> &'static str {
        ""
    }
    fn start(
        &self,
        info: &StartInfo<'_>,
        _boot: &mut dyn Bootstrap,
    ) -> Result<Box<dyn Starting>, P2pError> {
        let t = StreamTransport::listen(&format!("tsunagi-{}", info.job_id), info.rank)?;
        Ok(Box::new(StartingStream(t)))
    }
}

struct StartingStream(StreamTransport);

impl Starting for StartingStream {
    fn connect(&mut self, info: &StartInfo<'_>, _: &mut dyn Bootstrap) -> Result<(), P2pError> {
        self.0.set_peers(info.peers);
        Ok(())
    }
    fn finish(self: Box<Self>, _: &StartInfo<'_>) -> Result<Box<dyn Transport>, P2pError> {
        Ok(Box::new(self.0))
    }
}
