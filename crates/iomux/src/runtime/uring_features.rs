//! Which of the configuration's optional io_uring features a loop gets:
//! each is probed on the loop's own ring at start and, when the kernel
//! lacks it, switched off with the reason, which the loop's stats name.

use super::stats::UringFeature;
use super::Config;
use crate::sys::uring::Ring;
use std::io;
use std::time::Duration;

/// The features a loop runs with.
pub(crate) struct Active {
    /// Batched waits' minimum wait; zero when off.
    pub(crate) min_wait: Duration,
    /// Receive bundles.
    pub(crate) bundle: bool,
    /// Writes of at least this many bytes are zero-copy sends; 0 when off.
    pub(crate) send_zc_min: usize,
}

/// Enables on `ring` what `cfg` asks for and the kernel allows, and sets
/// up its provided-buffer ring as buffer group `group`. Errors only when
/// the buffer ring cannot be set up at all.
pub(crate) fn enable(ring: &mut Ring, cfg: &Config, group: u16) -> io::Result<(Active, Vec<UringFeature>)> {
    let mut features = Vec::with_capacity(5);

    let register = cfg.uring_register_ring.then(|| ring.register_ring_fd());
    features
        .push(feature("register_ring", register.map(|r| r.map_err(|e| lacks("IORING_REGISTER_RING_FDS", "5.18", e)))));

    let min_wait = (!cfg.uring_min_wait.is_zero()).then(|| match ring.has_min_wait() {
        true => Ok(()),
        false => Err("the kernel lacks IORING_FEAT_MIN_TIMEOUT (Linux 6.12)".to_string()),
    });
    let min_wait_on = matches!(min_wait, Some(Ok(())));
    features.push(feature("min_wait", min_wait));

    // Whether buffers are consumed incrementally decides their default
    // size: set up as asked; if the kernel refused the flag (EINVAL before
    // 6.12), set up once more, plain, with the plain geometry.
    let (count, size) = cfg.ring_geometry(cfg.uring_buf_inc);
    let incremental = match ring.setup_buffers(group, count, size, cfg.uring_buf_inc) {
        Ok(()) => cfg.uring_buf_inc,
        Err(e) if cfg.uring_buf_inc && e.raw_os_error() == Some(libc::EINVAL) => {
            let (count, size) = cfg.ring_geometry(false);
            ring.setup_buffers(group, count, size, false)?;
            false
        }
        Err(e) => return Err(e),
    };
    let buf_inc = cfg.uring_buf_inc.then(|| match incremental {
        true => Ok(()),
        false => Err("the kernel lacks IOU_PBUF_RING_INC (Linux 6.12)".to_string()),
    });
    features.push(feature("buf_inc", buf_inc));

    let bundle = cfg.uring_bundle.then(|| match ring.has_bundles() {
        true => Ok(()),
        false => Err("the kernel lacks IORING_FEAT_RECVSEND_BUNDLE (Linux 6.10)".to_string()),
    });
    let bundle_on = matches!(bundle, Some(Ok(())));
    features.push(feature("bundle", bundle));

    let send_zc = (cfg.uring_send_zc_min > 0).then(|| match ring.has_send_zc() {
        Ok(true) => Ok(()),
        Ok(false) => Err("the kernel lacks IORING_OP_SEND_ZC (Linux 6.0)".to_string()),
        Err(e) => Err(lacks("IORING_REGISTER_PROBE", "5.6", e)),
    });
    let send_zc_on = matches!(send_zc, Some(Ok(())));
    features.push(feature("send_zc", send_zc));

    let active = Active {
        min_wait: if min_wait_on { cfg.uring_min_wait } else { Duration::ZERO },
        bundle: bundle_on,
        send_zc_min: if send_zc_on { cfg.uring_send_zc_min } else { 0 },
    };
    Ok((active, features))
}

/// A feature not asked for (None), in use (Ok), or switched off (Err: why).
fn feature(name: &'static str, outcome: Option<Result<(), String>>) -> UringFeature {
    UringFeature {
        name,
        requested: outcome.is_some(),
        active: matches!(outcome, Some(Ok(()))),
        why_not: outcome.and_then(Result::err),
    }
}

fn lacks(call: &str, linux: &str, e: io::Error) -> String {
    format!("{call} failed: {e} (needs Linux {linux})")
}
