//! The six `rcl_interfaces` parameter services (`ros2 param list/get/describe/set/dump`) over the
//! node's [`ParamStore`], and `/parameter_events` on every change.
//!
//! ros2-client has its own parameter services, but its `describe_parameters` answers without
//! descriptions or ranges and its store knows nothing of read-only parameters, so the node
//! serves these itself. Requests are polled from the node's DDS loop.

use std::sync::{Arc, Mutex};

use ros2_client::parameters::raw;
use ros2_client::rcl_interfaces as rcl;
use ros2_client::service::ServiceMapping;
use ros2_client::{qos, Name, Node, NodeName, Publisher, QosProfile, ServiceTypeName};

use sp_dust3r_core::params::args::ParamValue;
use sp_dust3r_core::params::{Constraint, ParamError, ParamSpec, ParamStore};

use crate::replies::{DiscoveredReaders, Service};

/// Why the parameter services could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ParamServiceError {
    /// DDS refused a service or the events topic.
    #[error("cannot create parameter service {name}")]
    Create {
        /// The service or topic.
        name: String,
        /// DDS's reason.
        #[source]
        source: ros2_client::CreateError,
    },
    /// A service name is not a valid ROS name.
    #[error("invalid parameter service name {name}")]
    Name {
        /// The name.
        name: String,
        /// What is wrong with it.
        #[source]
        source: ros2_client::names::NameError,
    },
}

/// How requests and replies are framed on DDS: rmw_cyclonedds puts a request header in the
/// payload, the other RMWs (Fast DDS, the ROS 2 default) carry it in inline QoS. Chosen by
/// `RMW_IMPLEMENTATION`, as the ROS tools on the same machine would be.
pub fn service_mapping() -> ServiceMapping {
    match std::env::var("RMW_IMPLEMENTATION") {
        Ok(rmw) if rmw.contains("cyclonedds") => ServiceMapping::Cyclone,
        _ => ServiceMapping::Enhanced,
    }
}

/// The node's parameter services (list, get, get types, describe, set, set atomically) and `/parameter_events`, answered from the store.
pub struct ParamServices {
    store: Arc<Mutex<ParamStore>>,
    node_fqn: String,
    list: Service<rcl::ListParametersRequest, rcl::ListParametersResponse>,
    get: Service<rcl::GetParametersRequest, rcl::GetParametersResponse>,
    get_types: Service<rcl::GetParameterTypesRequest, rcl::GetParameterTypesResponse>,
    describe: Service<rcl::DescribeParametersRequest, rcl::DescribeParametersResponse>,
    set: Service<rcl::SetParametersRequest, rcl::SetParametersResponse>,
    set_atomically: Service<rcl::SetParametersRequest, rcl::SetParametersAtomicallyResponse>,
    events: Publisher<raw::ParameterEvent>,
}

/// rmw's services profile: reliable, volatile, keep last 10.
pub(crate) fn services_qos() -> QosProfile {
    QosProfile::publisher_default()
        .reliability_reliable(qos::WhenFull::DEFAULT)
        .history(qos::History::KeepLast { depth: 10 })
}

impl ParamServices {
    /// Creates the services under the node's name.
    pub fn new(node: &mut Node, node_fqn: &str, store: Arc<Mutex<ParamStore>>) -> Result<Self, ParamServiceError> {
        let mapping = service_mapping();
        let rcl = |ty| ("rcl_interfaces", ty);
        let events_name = Name::new("/", "parameter_events")
            .map_err(|source| ParamServiceError::Name { name: "/parameter_events".into(), source })?;
        // rmw_qos_profile_parameter_events: reliable, volatile, keep last 1000.
        let events_qos = QosProfile::publisher_default()
            .reliability_reliable(qos::WhenFull::DEFAULT)
            .history(qos::History::KeepLast { depth: 1000 });
        let create =
            |source: ros2_client::CreateError| ParamServiceError::Create { name: "/parameter_events".into(), source };
        let topic = node
            .create_topic(
                &events_name,
                ros2_client::MessageTypeName::new("rcl_interfaces", "ParameterEvent"),
                &events_qos,
            )
            .map_err(create)?;
        let events = node.create_publisher(&topic, Some(events_qos)).map_err(create)?;
        Ok(Self {
            list: server(node, mapping, node_fqn, "list_parameters", rcl("ListParameters"))?,
            get: server(node, mapping, node_fqn, "get_parameters", rcl("GetParameters"))?,
            get_types: server(node, mapping, node_fqn, "get_parameter_types", rcl("GetParameterTypes"))?,
            describe: server(node, mapping, node_fqn, "describe_parameters", rcl("DescribeParameters"))?,
            set: server(node, mapping, node_fqn, "set_parameters", rcl("SetParameters"))?,
            set_atomically: server(
                node,
                mapping,
                node_fqn,
                "set_parameters_atomically",
                rcl("SetParametersAtomically"),
            )?,
            events,
            store,
            node_fqn: node_fqn.to_string(),
        })
    }

    /// Answers every pending request and writes the held replies that are due, their clients'
    /// readers looked up in `readers`; returns how many requests were answered. A request that
    /// cannot be read is logged and skipped.
    pub fn poll(
        &self,
        stamp: &sp_dust3r_core::msg::builtin_interfaces::Time,
        readers: &DiscoveredReaders<'_>,
    ) -> usize {
        let stamp = ros2_client::builtin_interfaces::Time::new(stamp.sec, stamp.nanosec);
        let mut n = 0;
        macro_rules! serve {
            ($server:expr, |$req:ident| $answer:expr) => {
                $server.release(readers);
                loop {
                    match $server.take() {
                        Ok(Some((id, $req))) => {
                            n += 1;
                            $server.answer(id, $answer, readers);
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!("unreadable parameter service request: {e:?}");
                            break;
                        }
                    }
                }
            };
        }
        // A fresh copy per request: a set earlier in this poll is seen by later gets.
        let snapshot = || self.store.lock().map(|s| s.clone()).ok();
        serve!(self.list, |req| rcl::ListParametersResponse { result: list(snapshot().as_ref(), &req.prefixes) });
        serve!(self.get, |req| rcl::GetParametersResponse { values: values(snapshot().as_ref(), &req.names) });
        serve!(self.get_types, |req| rcl::GetParameterTypesResponse { values: types(snapshot().as_ref(), &req.names) });
        serve!(self.describe, |req| rcl::DescribeParametersResponse {
            values: descriptors(snapshot().as_ref(), &req.names)
        });
        serve!(self.set, |req| rcl::SetParametersResponse {
            results: req.parameter.iter().map(|p| self.apply(std::slice::from_ref(p), stamp)).collect()
        });
        serve!(self.set_atomically, |req| rcl::SetParametersAtomicallyResponse {
            result: self.apply(&req.parameter, stamp)
        });
        n
    }

    /// Sets `params` all or none, publishes the change and logs it.
    fn apply(
        &self,
        params: &[raw::Parameter],
        stamp: ros2_client::builtin_interfaces::Time,
    ) -> raw::SetParametersResult {
        let changes = requested_changes(params);
        let result = changes.and_then(|c| match self.store.lock() {
            Ok(mut store) => store.set(&c),
            Err(_) => Err(ParamError::StoreUnavailable),
        });
        match result {
            Ok(applied) => {
                for (name, value) in &applied {
                    tracing::info!("parameter {name} set to {value:?}");
                }
                let changed = applied
                    .iter()
                    .map(|(name, value)| raw::Parameter { name: name.clone(), value: to_raw(value) })
                    .collect();
                let event = raw::ParameterEvent {
                    stamp,
                    node: self.node_fqn.clone(),
                    new_parameters: vec![],
                    changed_parameters: changed,
                    deleted_parameters: vec![],
                };
                if let Err(e) = self.events.publish(event) {
                    tracing::warn!("cannot publish /parameter_events: {e:?}");
                }
                raw::SetParametersResult { successful: true, reason: String::new() }
            }
            Err(e) => {
                tracing::warn!("parameter change refused: {e}");
                raw::SetParametersResult { successful: false, reason: e.to_string() }
            }
        }
    }
}

/// A service `name` under the node `fqn`, of type `(package, Type)`, in `mapping`'s framing.
pub(crate) fn server<Q: ros2_client::Message + Clone + 'static, R: ros2_client::Message + 'static>(
    node: &mut Node,
    mapping: ServiceMapping,
    fqn: &str,
    name: &str,
    (package, ty): (&str, &str),
) -> Result<Service<Q, R>, ParamServiceError> {
    let full = format!("{fqn}/{name}");
    let bad_name = |source| ParamServiceError::Name { name: full.clone(), source };
    let service = Name::new(fqn, name).map_err(bad_name)?;
    let (namespace, base) = fqn.rsplit_once('/').unwrap_or(("", fqn));
    let node_name = NodeName::new(if namespace.is_empty() { "/" } else { namespace }, base).map_err(bad_name)?;
    let reply_topic = service.to_dds_name("rr", &node_name, "Reply");
    let server = node
        .create_server(mapping, &service, &ServiceTypeName::new(package, ty), services_qos(), services_qos())
        .map_err(|source| ParamServiceError::Create { name: full.clone(), source })?;
    Ok(Service::new(server, mapping, reply_topic, full))
}

/// The changes a set request asks for, in the store's terms; refused whole when a value has a
/// type the node does not use.
pub fn requested_changes(params: &[raw::Parameter]) -> Result<Vec<(String, ParamValue)>, ParamError> {
    params
        .iter()
        .map(|p| {
            from_raw(&p.value).map(|v| (p.name.clone(), v)).ok_or_else(|| ParamError::Invalid {
                name: p.name.clone(),
                detail: format!("unsupported value type {}", p.value.ptype),
            })
        })
        .collect()
}

/// `get_parameters`: each name's value, NOT_SET for one the node does not declare.
pub fn values(store: Option<&ParamStore>, names: &[String]) -> Vec<raw::ParameterValue> {
    names.iter().map(|k| store.and_then(|s| s.get(k)).map(|(_, v)| to_raw(v)).unwrap_or_else(not_set)).collect()
}

/// `get_parameter_types`: each name's type, NOT_SET for one the node does not declare.
pub fn types(store: Option<&ParamStore>, names: &[String]) -> Vec<u8> {
    names
        .iter()
        .map(|k| store.and_then(|s| s.get(k)).map(|(_, v)| to_raw(v).ptype).unwrap_or(raw::ParameterType::NOT_SET))
        .collect()
}

/// `describe_parameters`: each name's descriptor (description, range, read-only).
pub fn descriptors(store: Option<&ParamStore>, names: &[String]) -> Vec<raw::ParameterDescriptor> {
    names
        .iter()
        .map(|k| store.and_then(|s| s.get(k)).map(|(spec, _)| describe(spec)).unwrap_or_else(|| unknown(k)))
        .collect()
}

/// Our parameter names have no `.` sections: a name is listed when there are no prefixes or it
/// equals one or lies under one.
pub fn list(store: Option<&ParamStore>, prefixes: &[String]) -> rcl::ListParametersResult {
    let names = store
        .map(|s| s.specs())
        .unwrap_or_default()
        .iter()
        .map(|s| s.name.to_string())
        .filter(|n| prefixes.is_empty() || prefixes.iter().any(|p| n == p || n.starts_with(&format!("{p}."))))
        .collect();
    rcl::ListParametersResult { names, prefixes: vec![] }
}

fn describe(spec: &ParamSpec) -> raw::ParameterDescriptor {
    let (integer_range, floating_point_range, constraints) = match &spec.constraint {
        Constraint::Integer { min, max } => {
            (vec![raw::IntegerRange { from_value: *min, to_value: *max, step: 0 }], vec![], String::new())
        }
        Constraint::Double { min, max } => {
            (vec![], vec![raw::FloatingPointRange { from_value: *min, to_value: *max, step: 0.0 }], String::new())
        }
        Constraint::OneOf(allowed) => (vec![], vec![], format!("one of: {}", allowed.join(", "))),
        Constraint::None => (vec![], vec![], String::new()),
    };
    raw::ParameterDescriptor {
        name: spec.name.to_string(),
        r#type: to_raw(&spec.default).ptype,
        description: spec.description.to_string(),
        additional_constraints: constraints,
        read_only: spec.read_only,
        dynamic_typing: false,
        floating_point_range,
        integer_range,
    }
}

fn unknown(name: &str) -> raw::ParameterDescriptor {
    raw::ParameterDescriptor {
        name: name.to_string(),
        r#type: raw::ParameterType::NOT_SET,
        description: String::new(),
        additional_constraints: String::new(),
        read_only: false,
        dynamic_typing: false,
        floating_point_range: vec![],
        integer_range: vec![],
    }
}

fn not_set() -> raw::ParameterValue {
    raw::ParameterValue {
        ptype: raw::ParameterType::NOT_SET,
        boolean_value: false,
        int_value: 0,
        double_value: 0.0,
        string_value: String::new(),
        byte_array: vec![],
        bool_array: vec![],
        int_array: vec![],
        double_array: vec![],
        string_array: vec![],
    }
}

/// A parameter value in rcl_interfaces' form.
pub fn to_raw(v: &ParamValue) -> raw::ParameterValue {
    use raw::ParameterType as T;
    let mut r = not_set();
    match v {
        ParamValue::Bool(b) => (r.ptype, r.boolean_value) = (T::BOOL, *b),
        ParamValue::Integer(i) => (r.ptype, r.int_value) = (T::INTEGER, *i),
        ParamValue::Double(d) => (r.ptype, r.double_value) = (T::DOUBLE, *d),
        ParamValue::String(s) => (r.ptype, r.string_value) = (T::STRING, s.clone()),
        ParamValue::BoolArray(a) => (r.ptype, r.bool_array) = (T::BOOL_ARRAY, a.clone()),
        ParamValue::IntegerArray(a) => (r.ptype, r.int_array) = (T::INTEGER_ARRAY, a.clone()),
        ParamValue::DoubleArray(a) => (r.ptype, r.double_array) = (T::DOUBLE_ARRAY, a.clone()),
        ParamValue::StringArray(a) => (r.ptype, r.string_array) = (T::STRING_ARRAY, a.clone()),
    }
    r
}

/// A parameter value from rcl_interfaces' form; `None` for a type the node does not use.
pub fn from_raw(r: &raw::ParameterValue) -> Option<ParamValue> {
    use raw::ParameterType as T;
    Some(match r.ptype {
        T::BOOL => ParamValue::Bool(r.boolean_value),
        T::INTEGER => ParamValue::Integer(r.int_value),
        T::DOUBLE => ParamValue::Double(r.double_value),
        T::STRING => ParamValue::String(r.string_value.clone()),
        T::BOOL_ARRAY => ParamValue::BoolArray(r.bool_array.clone()),
        T::INTEGER_ARRAY => ParamValue::IntegerArray(r.int_array.clone()),
        T::DOUBLE_ARRAY => ParamValue::DoubleArray(r.double_array.clone()),
        T::STRING_ARRAY => ParamValue::StringArray(r.string_array.clone()),
        _ => return None,
    })
}
