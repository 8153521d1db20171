//! Writer for numpy's .npy format, version 1.0, little endian, 1-D arrays.
//! (Format facts from numpy's NEP 1 / `numpy.lib.format` documentation.)

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// An element type with its numpy dtype descriptor and little-endian encoding.
pub trait Element: Copy {
    const DESCR: &'static str;
    fn put(self, out: &mut Vec<u8>);
}

macro_rules! element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DESCR: &'static str = $d;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}

element!(u8, "|u1");
element!(u16, "<u2");
element!(u32, "<u4");
element!(u64, "<u8");
element!(f64, "<f8");

/// The magic, version and padded header dict; the total is a multiple of 64 bytes
/// so the data is aligned when numpy memory-maps the file.
pub fn header(descr: &str, len: usize) -> Vec<u8> {
    let dict = format!("{{'descr': '{}', 'fortran_order': False, 'shape': ({},), }}", descr, len);
    let unpadded = 10 + dict.len() + 1;
    let pad = (64 - unpadded % 64) % 64;
    let hlen = dict.len() + pad + 1;
    let mut out = Vec::with_capacity(10 + hlen);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(hlen as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat(b' ').take(pad));
    out.push(b'\n');
    out
}

pub fn write<T: Element>(path: &Path, values: &[T]) -> Result<(), String> {
    let err = |e: std::io::Error| format!("cannot write {}: {}", path.display(), e);
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path).map_err(err)?);
    w.write_all(&header(T::DESCR, values.len())).map_err(err)?;
    let mut chunk = Vec::with_capacity(1 << 16);
    for block in values.chunks(8192) {
        chunk.clear();
        for v in block {
            v.put(&mut chunk);
        }
        w.write_all(&chunk).map_err(err)?;
    }
    w.flush().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_aligned_and_terminated() {
        for n in [0usize, 7, 123456789] {
            let h = header("<f8", n);
            assert_eq!(h.len() % 64, 0);
            assert_eq!(*h.last().unwrap(), b'\n');
            let hlen = u16::from_le_bytes([h[8], h[9]]) as usize;
            assert_eq!(hlen + 10, h.len());
            assert!(String::from_utf8_lossy(&h).contains(&format!("({},)", n)));
        }
    }
}
