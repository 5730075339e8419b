//! CRC-32/MPEG-2 (poly 0x04C11DB7, init 0xFFFFFFFF, not reflected, no final xor), the
//! checksum of the Hesai body and tail CRCs (QT128, OT128, AT128 manuals, "CRC"), two ways:
//!
//! * [`crc32_mpeg2_bytewise`]: one table look-up per byte (the reference);
//! * [`crc32_mpeg2_slice8`]: slicing by 8 (eight tables, eight bytes per step);
//! * [`crc32_mpeg2_clmul`]: carry-less multiplication (x86-64 PCLMULQDQ, detected at run
//!   time): 64 bytes per step folded into a 128-bit residue (`crate::simd::clmul_fold_msb`),
//!   which with the last bytes goes through slicing by 8.
//!
//! [`crc32_mpeg2`] picks the fastest available; the tests check every path against the
//! bytewise one on random data of every length up to 1.2 kB and every alignment.

/// The generator polynomial without its x^32 term.
const POLY: u32 = 0x04C1_1DB7;

/// `TABLES[k][i]`: the CRC register after byte `i` followed by `k` zero bytes (init 0).
static TABLES: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u32) << 24;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x8000_0000 != 0 {
                (c << 1) ^ POLY
            } else {
                c << 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev << 8) ^ t[0][(prev >> 24) as usize];
            i += 1;
        }
        k += 1;
    }
    t
};

/// `x^n mod POLY` (degree < 32), the folding factors of [`crc32_mpeg2_clmul`].
const fn x_pow_mod(n: u32) -> u64 {
    let mut r: u64 = 1;
    let mut i = 0;
    while i < n {
        r <<= 1;
        if r & (1 << 32) != 0 {
            r ^= (1 << 32) | POLY as u64;
        }
        i += 1;
    }
    r
}

/// `[x^576, x^512, x^192, x^128] mod POLY` (`crate::simd::clmul_fold_msb`).
const FOLD: [u64; 4] = [
    x_pow_mod(576),
    x_pow_mod(512),
    x_pow_mod(192),
    x_pow_mod(128),
];

/// Below this length the folding set-up costs more than it saves.
const CLMUL_MIN_LEN: usize = 64;

/// CRC-32/MPEG-2 of `data`, with the fastest implementation available: carry-less
/// multiplication from 64 bytes on when the CPU has it, else slicing by 8.
pub fn crc32_mpeg2(data: &[u8]) -> u32 {
    if data.len() >= CLMUL_MIN_LEN
        && let Some(crc) = crc32_mpeg2_clmul(data)
    {
        return crc;
    }
    crc32_mpeg2_slice8(data)
}

/// CRC-32/MPEG-2 of `data` by carry-less multiplication; `None` when the CPU lacks
/// PCLMULQDQ or SSSE3 (or off x86-64), or `data` is shorter than 16 bytes.
pub fn crc32_mpeg2_clmul(data: &[u8]) -> Option<u32> {
    let (residue, used) = crate::simd::clmul_fold_msb(0xFFFF_FFFF, data, &FOLD)?;
    // A register started at 0 over the residue's bytes ends at residue · x^32 mod POLY, the
    // register after `data[..used]` from 0xFFFFFFFF; then the rest as usual.
    let crc = crc32_mpeg2_update_slice8(0, &residue);
    Some(crc32_mpeg2_update_slice8(
        crc,
        data.get(used..).unwrap_or_default(),
    ))
}

/// CRC-32/MPEG-2 continued from register `crc` over `data` (init 0xFFFFFFFF for a fresh CRC),
/// one table look-up per byte.
pub fn crc32_mpeg2_update_bytewise(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = (crc << 8) ^ TABLES[0][((crc >> 24) as u8 ^ b) as usize];
    }
    crc
}

/// CRC-32/MPEG-2 of `data`, one byte per step (the reference implementation).
pub fn crc32_mpeg2_bytewise(data: &[u8]) -> u32 {
    crc32_mpeg2_update_bytewise(0xFFFF_FFFF, data)
}

/// CRC-32/MPEG-2 continued from register `crc` over `data`, eight bytes per step (slicing by
/// 8: the register is folded into the first four bytes, then eight table look-ups).
pub fn crc32_mpeg2_update_slice8(mut crc: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(8);
    for w in &mut chunks {
        let hi = crc ^ u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
        let lo = u32::from_be_bytes([w[4], w[5], w[6], w[7]]);
        crc = t[7][(hi >> 24) as usize]
            ^ t[6][((hi >> 16) & 0xFF) as usize]
            ^ t[5][((hi >> 8) & 0xFF) as usize]
            ^ t[4][(hi & 0xFF) as usize]
            ^ t[3][(lo >> 24) as usize]
            ^ t[2][((lo >> 16) & 0xFF) as usize]
            ^ t[1][((lo >> 8) & 0xFF) as usize]
            ^ t[0][(lo & 0xFF) as usize];
    }
    crc32_mpeg2_update_bytewise(crc, chunks.remainder())
}

/// CRC-32/MPEG-2 of `data`, slicing by 8 (the portable path).
pub fn crc32_mpeg2_slice8(data: &[u8]) -> u32 {
    crc32_mpeg2_update_slice8(0xFFFF_FFFF, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*, deterministic.
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s >> 12;
                s ^= s << 25;
                s ^= s >> 27;
                (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
            })
            .collect()
    }

    #[test]
    fn check_values() {
        for f in [crc32_mpeg2, crc32_mpeg2_bytewise, crc32_mpeg2_slice8] {
            assert_eq!(f(b"123456789"), 0x0376_E6E7);
            assert_eq!(f(b"12345678"), 0x49E3_C2FB);
            assert_eq!(f(b""), 0xFFFF_FFFF);
        }
    }

    /// The carry-less path runs wherever the CPU has the instructions (every x86-64 machine
    /// since 2010, the CI machine among them), and only needs 16 bytes.
    #[test]
    fn clmul_is_available_and_checks_short_input() {
        #[cfg(target_arch = "x86_64")]
        {
            let has = std::arch::is_x86_feature_detected!("pclmulqdq")
                && std::arch::is_x86_feature_detected!("ssse3");
            assert_eq!(crc32_mpeg2_clmul(&[0; 16]).is_some(), has);
        }
        assert_eq!(crc32_mpeg2_clmul(&[0; 15]), None);
        assert_eq!(crc32_mpeg2_clmul(b""), None);
    }

    #[test]
    fn fold_factors() {
        // x^32 ≡ POLY; the factors are below degree 32.
        assert_eq!(x_pow_mod(32), u64::from(POLY));
        assert_eq!(x_pow_mod(31), 1 << 31);
        assert!(FOLD.iter().all(|&k| k < 1 << 32));
    }

    #[test]
    fn every_path_matches_bytewise() {
        let data = bytes(0x9E37_79B9_7F4A_7C15, 1300);
        for len in 0..=1200 {
            for start in [0, 1, 3, 7, 13] {
                let d = &data[start..start + len];
                let want = crc32_mpeg2_bytewise(d);
                assert_eq!(
                    crc32_mpeg2_slice8(d),
                    want,
                    "slice8 len {len} start {start}"
                );
                assert_eq!(crc32_mpeg2(d), want, "dispatch len {len} start {start}");
                if let Some(c) = crc32_mpeg2_clmul(d) {
                    assert_eq!(c, want, "clmul len {len} start {start}");
                }
            }
        }
        for seed in 1..200u64 {
            let n = (seed as usize * 7919) % 4096;
            let d = bytes(seed, n);
            let want = crc32_mpeg2_bytewise(&d);
            assert_eq!(crc32_mpeg2_slice8(&d), want);
            assert_eq!(crc32_mpeg2(&d), want);
            if let Some(c) = crc32_mpeg2_clmul(&d) {
                assert_eq!(c, want, "clmul seed {seed}");
            }
        }
    }
}
