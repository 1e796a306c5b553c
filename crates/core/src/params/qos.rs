//! A publisher's delivery guarantees, as the parameters and the outputs name them; each DDS
//! stack maps them onto its own QoS.

/// How a writer delivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterQos {
    /// Reliable (else best effort).
    pub reliable: bool,
    /// Keep every sample until delivered (else the last `depth`).
    pub keep_all: bool,
    /// Keep last this many.
    pub depth: i32,
    /// Late joiners get the last `depth` samples.
    pub transient_local: bool,
}

impl WriterQos {
    /// The outputs' profile, what RViz subscribes with: reliable, volatile, keep last 10.
    pub const OUTPUTS: Self = Self { reliable: true, keep_all: false, depth: 10, transient_local: false };
}

impl std::fmt::Display for WriterQos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reliability = if self.reliable { "reliable" } else { "best effort" };
        let durability = if self.transient_local { "transient local" } else { "volatile" };
        if self.keep_all {
            write!(f, "{reliability}, keep all, {durability}")
        } else {
            write!(f, "{reliability}, keep last {}, {durability}", self.depth)
        }
    }
}
