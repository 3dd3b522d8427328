//! How the fuzz targets split a stream: chunk sizes of 1 to 16 bytes from
//! the input's first byte (xorshift32), so a crash replays exactly.

pub fn sizes(seed: u8) -> impl Iterator<Item = usize> {
    let mut state = u32::from(seed) | 1;
    std::iter::from_fn(move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        Some((state % 16) as usize + 1)
    })
}
