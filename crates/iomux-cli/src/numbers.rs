//! Numbers as tables, pages and progress lines print them.

/// A whole number with thousands separators: 1234567 -> "1,234,567".
pub fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if x < 0.0 {
        out.insert(0, '-');
    }
    out
}
