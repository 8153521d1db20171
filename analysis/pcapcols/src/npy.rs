//! Writer for numpy's .npy format, version 1.0, little endian, 1-D arrays.
//! (Format facts from numpy's NEP 1 / `numpy.lib.format` documentation.)

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
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
/// so the data is aligned when numpy memory-maps the file. Always 128 bytes for
/// 1-D arrays, so a streamed file's header can be rewritten once the length is known.
pub fn header(descr: &str, len: usize) -> Vec<u8> {
    let dict = format!("{{'descr': '{}', 'fortran_order': False, 'shape': ({},), }}", descr, len);
    let unpadded = 10 + dict.len() + 1;
    let total = if unpadded <= HEADER_LEN { HEADER_LEN } else { (unpadded + 63) / 64 * 64 };
    let pad = total - unpadded;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&((total - 10) as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat(b' ').take(pad));
    out.push(b'\n');
    out
}

const HEADER_LEN: usize = 128;

/// A column written element by element as packets are decoded, so a capture of
/// any size needs only a small buffer per column, never the whole array in memory.
pub struct ColumnWriter<T: Element> {
    path: std::path::PathBuf,
    out: BufWriter<File>,
    buf: Vec<u8>,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: Element> ColumnWriter<T> {
    pub fn create(path: &Path) -> Result<ColumnWriter<T>, String> {
        let file = File::create(path).map_err(|e| format!("cannot write {}: {}", path.display(), e))?;
        let mut out = BufWriter::with_capacity(1 << 16, file);
        // Placeholder with the final header's size; rewritten by finish().
        out.write_all(&header(T::DESCR, 0))
            .map_err(|e| format!("cannot write {}: {}", path.display(), e))?;
        Ok(ColumnWriter { path: path.to_path_buf(), out, buf: Vec::with_capacity(1 << 16), len: 0, _t: Default::default() })
    }

    #[inline]
    pub fn push(&mut self, v: T) -> Result<(), String> {
        v.put(&mut self.buf);
        self.len += 1;
        if self.buf.len() >= (1 << 16) - 16 {
            self.flush_buf()?;
        }
        Ok(())
    }

    fn flush_buf(&mut self) -> Result<(), String> {
        let r = self.out.write_all(&self.buf);
        self.buf.clear();
        r.map_err(|e| format!("cannot write {}: {}", self.path.display(), e))
    }

    pub fn finish(mut self) -> Result<(), String> {
        self.flush_buf()?;
        let err = |e: std::io::Error| format!("cannot write {}: {}", self.path.display(), e);
        let h = header(T::DESCR, self.len);
        if h.len() != HEADER_LEN {
            return Err(format!("{}: {} elements do not fit the npy header", self.path.display(), self.len));
        }
        self.out.seek(SeekFrom::Start(0)).map_err(err)?;
        self.out.write_all(&h).map_err(err)?;
        self.out.flush().map_err(err)
    }
}

pub fn write<T: Element>(path: &Path, values: &[T]) -> Result<(), String> {
    let mut w = ColumnWriter::<T>::create(path)?;
    for v in values {
        w.push(*v)?;
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_aligned_and_terminated() {
        for n in [0usize, 7, 123456789, usize::MAX] {
            let h = header("<f8", n);
            assert_eq!(h.len(), HEADER_LEN);
            assert_eq!(*h.last().unwrap(), b'\n');
            let hlen = u16::from_le_bytes([h[8], h[9]]) as usize;
            assert_eq!(hlen + 10, h.len());
            assert!(String::from_utf8_lossy(&h).contains(&format!("({},)", n)));
        }
    }
}
