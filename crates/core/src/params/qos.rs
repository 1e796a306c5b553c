//! An endpoint's delivery guarantees, as the parameters, the outputs and the node's inputs name
//! them; each DDS stack maps them onto its own QoS.

/// How a writer delivers, or what a reader asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qos {
    /// Reliable (else best effort).
    pub reliable: bool,
    /// Keep every sample until delivered (else the last `depth`).
    pub keep_all: bool,
    /// Keep last this many.
    pub depth: i32,
    /// Late joiners get the last `depth` samples.
    pub transient_local: bool,
}

impl Qos {
    /// The outputs' profile, what RViz subscribes with: reliable, volatile, keep last 10.
    pub const OUTPUTS: Self = Self { reliable: true, keep_all: false, depth: 10, transient_local: false };
    /// Camera inputs, rclcpp's SensorDataQoS: best effort, keep last 5.
    pub const SENSOR_DATA: Self = Self { reliable: false, keep_all: false, depth: 5, transient_local: false };
    /// tf2's /tf_static: reliable, transient local (the transforms were sent long before),
    /// enough history for many broadcasters.
    pub const TF_STATIC: Self = Self { reliable: true, keep_all: false, depth: 100, transient_local: true };
    /// tf2's /tf listener: reliable, volatile, keep last 100.
    pub const TF: Self = Self { reliable: true, keep_all: false, depth: 100, transient_local: false };
    /// /clock, rclcpp's ClockQoS: best effort, keep last 1.
    pub const CLOCK: Self = Self { reliable: false, keep_all: false, depth: 1, transient_local: false };
    /// rcl's /rosout: reliable, transient local (late joiners get recent records), keep last 1000.
    pub const ROSOUT: Self = Self { reliable: true, keep_all: false, depth: 1000, transient_local: true };
}

impl std::fmt::Display for Qos {
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
