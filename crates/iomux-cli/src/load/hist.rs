//! Latency histograms and their exact encoding on disk: HdrHistogram's
//! V2 + deflate format (what the Java and Rust libraries both read),
//! base64 in JSON, so results from many processes or hosts add up exactly.

use crate::CliResult;
use anyhow::{anyhow, Context as _};
use base64::Engine;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

/// Nanoseconds, 1 ns to 1 hour at 3 significant digits. Every histogram
/// of a load has these bounds, so adding one to another cannot fail.
pub fn latency_histogram() -> Histogram<u64> {
    // Valid bounds: creating it never fails.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap_or_else(|_| unreachable!())
}

/// Adds `o` to `h`. Histograms decoded from a file may have other bounds:
/// say so, rather than drop counts.
pub fn add(h: &mut Histogram<u64>, o: &Histogram<u64>) -> CliResult<()> {
    h.add(o).map_err(|e| anyhow!("adding latency histograms: {e:?} (max {} ns)", o.max()))
}

/// V2 + deflate bytes.
pub fn encode(h: &Histogram<u64>, serializer: &mut V2DeflateSerializer) -> CliResult<Vec<u8>> {
    let mut out = Vec::new();
    serializer.serialize(h, &mut out).context("encoding a latency histogram")?;
    Ok(out)
}

pub fn decode(bytes: &[u8]) -> CliResult<Histogram<u64>> {
    let h: Histogram<u64> = Deserializer::new().deserialize(&mut &bytes[..]).context("decoding a latency histogram")?;
    // Into the standard bounds, so that it adds to any other.
    let mut standard = latency_histogram();
    add(&mut standard, &h)?;
    Ok(standard)
}

/// The `latency_hdr` field of the load JSON.
pub fn to_base64(h: &Histogram<u64>) -> CliResult<String> {
    Ok(base64::engine::general_purpose::STANDARD.encode(encode(h, &mut V2DeflateSerializer::new())?))
}

pub fn from_base64(text: &str) -> CliResult<Histogram<u64>> {
    let bytes =
        base64::engine::general_purpose::STANDARD.decode(text.trim()).context("the latency histogram is not base64")?;
    decode(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_survive_the_round_trip_exactly() {
        let mut h = latency_histogram();
        for v in [1u64, 17, 999, 12_345, 7_000_000, 3_000_000_000] {
            h.record_n(v, v % 7 + 1).unwrap();
        }
        let back = from_base64(&to_base64(&h).unwrap()).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.value_at_quantile(0.999), h.value_at_quantile(0.999));
        assert!(from_base64("not base64!").is_err());
        assert!(from_base64("AAAA").is_err());
    }
}
