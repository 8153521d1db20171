//! Sizes as startlab writes them (`config/sizes.py`): 70KB = 70,000 bytes, 2MB,
//! 1.5MiB, 4096. SI units as the papers write them; KiB/MiB/GiB binary.

pub const MAX_SIZE: u64 = 10_000_000_000;

pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("'{text}' is not a size (e.g. 70KB, 2MB, 1.5MiB, 4096)")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size (e.g. 70KB, 2MB, 1.5MiB, 4096)"))?;
    let bytes = (value * scale).round();
    if !(1.0..=MAX_SIZE as f64).contains(&bytes) {
        return Err(format!("size {bytes} bytes is outside 1 B … 10 GB"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_startlab() {
        assert_eq!(parse_size("70KB"), Ok(70_000));
        assert_eq!(parse_size("2MB"), Ok(2_000_000));
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert_eq!(parse_size("1.5MiB"), Ok(1_572_864));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 12 B "), Ok(12));
        assert!(parse_size("0").is_err());
        assert!(parse_size("2 mb").is_err());
        assert!(parse_size("11GB").is_err());
    }
}
