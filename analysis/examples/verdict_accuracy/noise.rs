//! The accuracy campaign's random stream and noise models (`../verdict_accuracy.rs` says what
//! each model stands for).

/// splitmix64: small, seedable, good enough for noise.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A uniform draw in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit().max(1e-300), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }
}

#[derive(Clone, Copy)]
pub struct Noise {
    pub name: &'static str,
    pub spread: f64,
    pub contended: f64,
    pub alone_spread: f64,
    pub alone_contended: f64,
    /// Share of the first pass's cells in a tight clump (+-2%) this far above the centre (log
    /// units): the clumped model, 0 elsewhere.
    pub clump: f64,
    pub clump_at: f64,
}

/// The model reported in the full table but not held to the target in the small run: a quiet
/// fabric with a stall tail meets it in the full table (seed 1) and misses it by a few trials in
/// one cell or another with other seeds (a link at 10%: 98.7% of 450 with seed 3,
/// `docs/evidence/settled-in-two-2026-12-05/`);
/// CI's 10 trials per cell would fail on one miss.
pub const UNGATED: &str = "quiet-tail";

pub const NOISES: [Noise; 5] = [
    Noise {
        name: "ib",
        spread: 0.005,
        contended: 0.0,
        alone_spread: 0.005,
        alone_contended: 0.0,
        clump: 0.0,
        clump_at: 0.0,
    },
    Noise {
        name: "quiet",
        spread: 0.01,
        contended: 0.0,
        alone_spread: 0.01,
        alone_contended: 0.0,
        clump: 0.0,
        clump_at: 0.0,
    },
    Noise {
        name: "quiet-tail",
        spread: 0.01,
        contended: 0.02,
        alone_spread: 0.01,
        alone_contended: 0.05,
        clump: 0.0,
        clump_at: 0.0,
    },
    Noise {
        name: "noisy",
        spread: 0.30,
        contended: 0.05,
        alone_spread: 0.15,
        alone_contended: 0.02,
        clump: 0.0,
        clump_at: 0.0,
    },
    Noise {
        name: "clumped",
        spread: 0.30,
        contended: 0.05,
        alone_spread: 0.15,
        alone_contended: 0.02,
        clump: 0.25,
        clump_at: 0.30,
    },
];

impl Noise {
    pub fn factor(&self, rng: &mut Rng, alone: bool) -> f64 {
        let (s, c) = if alone {
            (self.alone_spread, self.alone_contended)
        } else {
            (self.spread, self.contended)
        };
        if !alone && self.clump > 0.0 && rng.unit() < self.clump {
            return (self.clump_at + 0.02 * rng.normal()).exp();
        }
        let mut f = (s * rng.normal()).exp();
        if rng.unit() < c {
            f /= 1.5 + 2.5 * rng.unit();
        }
        f
    }
}
